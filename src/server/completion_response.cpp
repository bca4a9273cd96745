#include "server/completion_response.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace cellm::server {
namespace {

using nlohmann::json;

bool is_chat(const ResponseHead& head) { return head.endpoint == Endpoint::ChatCompletions; }

json envelope(const ResponseHead& head, bool chunk) {
  const char* object = is_chat(head) ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", head.id}, {"object", object}, {"created", head.created}, {"model", head.model}};
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// One streamed choice: a chat delta or a completion text.
json chunk_with(const ResponseHead& head, json delta, const std::string& text, const json& finish_reason,
                bool with_usage_field) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (is_chat(head)) choice["delta"] = std::move(delta);
  else choice["text"] = text;
  json j = envelope(head, true);
  j["choices"] = json::array({std::move(choice)});
  if (with_usage_field) j["usage"] = nullptr;
  return j;
}

}  // namespace

ResponseHead new_response_head(Endpoint endpoint, const std::string& model) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char suffix[33];
  std::snprintf(suffix, sizeof suffix, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  ResponseHead head;
  head.endpoint = endpoint;
  head.id = (endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-") + std::string(suffix, 24);
  head.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  head.model = model;
  return head;
}

Usage usage_of(const batching::GenerationResult& result) {
  return {result.prompt_tokens, static_cast<int64_t>(result.tokens.size())};
}

std::optional<std::string> openai_finish_reason(batching::FinishReason reason) {
  switch (reason) {
    case batching::FinishReason::Stop: return "stop";
    case batching::FinishReason::Length: return "length";
    default: return std::nullopt;
  }
}

std::optional<ApiError> generation_error(const batching::GenerationResult& result) {
  switch (result.finish_reason) {
    case batching::FinishReason::Cancelled:
      return ApiError(503, "server_error", "the generation was cancelled: the server is shutting down", std::nullopt,
                      "cancelled", 1);
    case batching::FinishReason::Failed:
      return ApiError(500, "server_error", "the generation failed: " + result.error, std::nullopt, "generation_failed");
    default: return std::nullopt;
  }
}

json completion_response(const ResponseHead& head, const std::string& text, const std::string& finish_reason,
                         const Usage& usage) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (is_chat(head)) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  json j = envelope(head, false);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return j;
}

json role_chunk(const ResponseHead& head, bool with_usage_field) {
  return chunk_with(head, {{"role", "assistant"}, {"content", ""}}, "", nullptr, with_usage_field);
}

json text_chunk(const ResponseHead& head, const std::string& text, bool with_usage_field) {
  return chunk_with(head, {{"content", text}}, text, nullptr, with_usage_field);
}

json finish_chunk(const ResponseHead& head, const std::string& finish_reason, bool with_usage_field) {
  return chunk_with(head, json::object(), "", finish_reason, with_usage_field);
}

json usage_chunk(const ResponseHead& head, const Usage& usage) {
  json j = envelope(head, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

json models_response(const std::string& model_id, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "cellm"}}})}};
}

}  // namespace cellm::server
