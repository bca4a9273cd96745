#pragma once
// Server-Sent Events framing of an OpenAI stream: each chunk is one event
//   data: {...json...}\n\n
// and the stream ends with data: [DONE]\n\n.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cellm::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// One event: batching::json_text's compact JSON holds no newline, so one data line carries it.
std::string sse_event(const nlohmann::json& data);

}  // namespace cellm::server
