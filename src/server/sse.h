#pragma once
// Server-Sent Events framing of an OpenAI stream: each chunk is one event
//   data: {...json...}\n\n
// and the stream ends with data: [DONE]\n\n.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cellm::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Compact JSON with any byte sequence that is not UTF-8 replaced by U+FFFD: a model can emit
// such bytes, and one bad byte must not make the whole response unserializable.
std::string to_json_text(const nlohmann::json& value);

// One event; the compact JSON holds no newline, so one data line carries it.
std::string sse_event(const nlohmann::json& data);

}  // namespace cellm::server
