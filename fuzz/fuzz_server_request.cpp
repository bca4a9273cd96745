// fuzz_server_request: any bytes as the JSON body of POST /v1/chat/completions or
// /v1/completions, through the server's request parser (src/server/completion_request.*).
//
// Input: [flags][body...]. flags bit 0 picks the endpoint (0 chat, 1 completions); bit 1
// nests the body's first `[]` kDeepNesting levels deep: the server takes bodies up to 16 MB,
// whose nesting libFuzzer's short inputs never reach.
// What must hold: a body is refused with a 400 ApiError (naming the field unless the body as a
// whole is wrong) whose error body serializes to JSON, or parsed into a request the engine
// takes as it is: sampling parameters the sampler accepts, a non-empty prompt or conversation
// of known roles, at most 4 non-empty stop strings, a positive max_tokens.
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "batching/json_text.h"
#include "batching/sampler.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/completion_request.h"
#include "support/check.h"
#include "support/input.h"

namespace {

using cellm::server::ApiError;
using cellm::server::CompletionRequest;
using cellm::server::Endpoint;

constexpr size_t kDeepNesting = size_t{1} << 18;  // 512 KB of brackets

std::string deepen(std::string_view body) {
  const size_t at = body.find("[]");
  if (at == std::string_view::npos) return std::string(body);
  std::string out(body.substr(0, at));
  out.append(kDeepNesting, '[');
  out.append(kDeepNesting, ']');
  out.append(body.substr(at + 2));
  return out;
}

void check_refusal(const ApiError& e) {
  FUZZ_CHECK(e.status() == 400 && e.type() == "invalid_request_error", "refused with ", e.status(), " ", e.type());
  FUZZ_CHECK(e.param() || std::string_view(e.what()).starts_with("the request body"), "unnamed field: ", e.what());
  // What the HTTP layer sends: it must be JSON whatever bytes the message quotes.
  const std::string text = cellm::batching::json_text(e.body());
  FUZZ_CHECK(nlohmann::json::accept(text), "the error body is not JSON: ", text);
}

void check_request(const CompletionRequest& r, Endpoint endpoint) {
  FUZZ_CHECK(r.endpoint == endpoint, "endpoint changed");
  // The engine builds a Sampler from these; its refusal would surface as a 500, not a 400.
  try {
    r.sampling.validate();
  } catch (const cellm::Error& e) {
    FUZZ_CHECK(false, "accepted sampling parameters the sampler refuses: ", e.what());
  }
  FUZZ_CHECK(!r.max_tokens || *r.max_tokens >= 1, "max_tokens ", *r.max_tokens);
  FUZZ_CHECK(r.stop.size() <= 4, r.stop.size(), " stop strings");
  for (const std::string& s : r.stop) FUZZ_CHECK(!s.empty(), "an empty stop string");
  if (endpoint == Endpoint::ChatCompletions) {
    FUZZ_CHECK(!r.messages.empty() && r.prompt.empty() && r.prompt_tokens.empty(), "chat request without messages");
    for (const auto& m : r.messages)
      FUZZ_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", "role '", m.role, "'");
  } else {
    FUZZ_CHECK(r.messages.empty() && (r.prompt.empty() != r.prompt_tokens.empty()), "completion without one prompt");
    for (int32_t id : r.prompt_tokens) FUZZ_CHECK(id >= 0, "token id ", id);
  }
  FUZZ_CHECK(!r.include_usage || r.stream, "include_usage without stream");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cellm::fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.byte();
  const Endpoint endpoint = (flags & 1) != 0 ? Endpoint::Completions : Endpoint::ChatCompletions;
  const std::string body = (flags & 2) != 0 ? deepen(in.rest()) : std::string(in.rest());
  try {
    check_request(cellm::server::parse_completion_request(endpoint, body), endpoint);
  } catch (const ApiError& e) {
    check_refusal(e);
  }
  return 0;
}
