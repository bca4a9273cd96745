#pragma once
// OpenAI response objects: the whole answer of a non-streaming request, the chunks of a
// streamed one, the model list. Pure functions of their arguments (the id and creation time
// are picked once per request by ResponseHead).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "batching/generation.h"
#include "server/api_error.h"
#include "server/completion_request.h"

namespace cellm::server {

// What every object of one response shares.
struct ResponseHead {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};
ResponseHead new_response_head(Endpoint endpoint, const std::string& model);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
Usage usage_of(const batching::GenerationResult& result);

// "stop" or "length"; a cancelled or failed generation has no OpenAI finish reason: it is an
// error (generation_error).
std::optional<std::string> openai_finish_reason(batching::FinishReason reason);
// The error a client gets for a generation that ended Cancelled (503: the server shut down
// under it) or Failed (500, with the engine's message); none for stop and length.
std::optional<ApiError> generation_error(const batching::GenerationResult& result);

// A non-streaming answer: chat.completion or text_completion.
nlohmann::json completion_response(const ResponseHead& head, const std::string& text, const std::string& finish_reason,
                                   const Usage& usage);

// Streaming chunks. Chat chunks carry a delta (the first one the assistant role), completion
// chunks a text. `with_usage_field`: stream_options.include_usage asks every chunk for a
// "usage": null until the last chunk, which carries the usage and no choices.
nlohmann::json role_chunk(const ResponseHead& head, bool with_usage_field);
nlohmann::json text_chunk(const ResponseHead& head, const std::string& text, bool with_usage_field);
nlohmann::json finish_chunk(const ResponseHead& head, const std::string& finish_reason, bool with_usage_field);
nlohmann::json usage_chunk(const ResponseHead& head, const Usage& usage);

// GET /v1/models: the one model this server holds.
nlohmann::json models_response(const std::string& model_id, int64_t created);

}  // namespace cellm::server
