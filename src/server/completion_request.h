#pragma once
// The body of POST /v1/chat/completions and POST /v1/completions, parsed and type-checked
// before anything reaches the engine. Every wrong field is a 400 (ApiError) that names it:
// wrong type, out of range, or a feature cellm does not serve (n > 1, logprobs, tools, ...).
// Harmless fields (user, presence_penalty, frequency_penalty, store, metadata, ...) are
// accepted and ignored; unknown fields are ignored too.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batching/sampler.h"
#include "tokenizer/chat_template.h"

namespace cellm::server {

enum class Endpoint { ChatCompletions, Completions };
const char* endpoint_path(Endpoint endpoint);

struct CompletionRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;                             // as the client named it; "" when absent
  std::vector<tokenizer::ChatMessage> messages;  // chat: the conversation
  std::string prompt;                            // completions: the text, used raw
  std::vector<int32_t> prompt_tokens;            // completions: token ids given instead of text
  std::optional<int32_t> max_tokens;             // none: until end of generation or the context
  batching::SamplingParams sampling;             // OpenAI's defaults: temperature 1, top_p 1
  std::vector<std::string> stop;                 // at most 4 strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage

  bool has_token_prompt() const { return !prompt_tokens.empty(); }
};

// Throws ApiError (400, invalid_request_error, param = the field) for anything malformed.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body);

}  // namespace cellm::server
