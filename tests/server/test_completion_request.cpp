#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/completion_request.h"

namespace cellm::server {
namespace {

// The 400 a body gets: param and a piece of the message.
ApiError rejection(Endpoint endpoint, const std::string& body) {
  try {
    parse_completion_request(endpoint, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

void expect_rejected(const std::string& body, const std::string& param, const std::string& words,
                     Endpoint endpoint = Endpoint::ChatCompletions) {
  const ApiError e = rejection(endpoint, body);
  EXPECT_EQ(e.status(), 400) << body;
  EXPECT_EQ(e.type(), "invalid_request_error");
  EXPECT_EQ(e.param().value_or("<none>"), param) << body << " -> " << e.what();
  EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
}

const std::string kHello = R"("messages": [{"role": "user", "content": "Hello"}])";

TEST(CompletionRequest, ChatWithEveryField) {
  const CompletionRequest r = parse_completion_request(Endpoint::ChatCompletions, R"({
    "model": "smol", "messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": [{"type": "text", "text": "Capital "},
                                                               {"type": "text", "text": "of France?"}]},
                                  {"role": "assistant", "content": null},
                                  {"role": "developer", "content": "Answer in English."}],
    "max_tokens": 12, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -3,
    "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true},
    "n": 1, "user": "u1", "presence_penalty": 0.5, "logprobs": false, "tools": []})");
  EXPECT_EQ(r.model, "smol");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "Capital of France?");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, "system");  // developer is the newer name of system
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(CompletionRequest, OpenAIDefaults) {
  const CompletionRequest r = parse_completion_request(Endpoint::ChatCompletions, "{" + kHello + "}");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop.empty());
  // null means "not given", as in the OpenAI API.
  const CompletionRequest n =
      parse_completion_request(Endpoint::ChatCompletions, "{" + kHello + R"(, "max_tokens": null, "stop": null})");
  EXPECT_FALSE(n.max_tokens.has_value());
}

TEST(CompletionRequest, MaxCompletionTokensAndTopPZero) {
  const CompletionRequest r = parse_completion_request(
      Endpoint::ChatCompletions, "{" + kHello + R"(, "max_completion_tokens": 7, "top_p": 0, "temperature": 0.8})");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);  // top_p 0 keeps only the likeliest token
}

TEST(CompletionRequest, CompletionPrompts) {
  const auto text = parse_completion_request(Endpoint::Completions, R"({"prompt": "Once upon", "stop": "\n"})");
  EXPECT_EQ(text.prompt, "Once upon");
  EXPECT_FALSE(text.has_token_prompt());
  EXPECT_EQ(text.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(parse_completion_request(Endpoint::Completions, R"({"prompt": ["one"]})").prompt, "one");
  const auto tokens = parse_completion_request(Endpoint::Completions, R"({"prompt": [1, 2, 3]})");
  EXPECT_EQ(tokens.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_completion_request(Endpoint::Completions, R"({"prompt": [[4, 5]]})").prompt_tokens,
            (std::vector<int32_t>{4, 5}));
}

TEST(CompletionRequest, MalformedBodies) {
  const ApiError not_json = rejection(Endpoint::ChatCompletions, "{\"messages\": [");
  EXPECT_EQ(not_json.status(), 400);
  EXPECT_NE(std::string(not_json.what()).find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(not_json.param().has_value());
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, "[1, 2]").status(), 400);
  EXPECT_EQ(rejection(Endpoint::ChatCompletions, "").status(), 400);
}

TEST(CompletionRequest, WrongTypesNameTheField) {
  expect_rejected(R"({})", "messages", "required");
  expect_rejected(R"({"messages": "hi"})", "messages", "must be an array");
  expect_rejected(R"({"messages": []})", "messages", "at least one");
  expect_rejected(R"({"messages": [3]})", "messages[0]", "must be an object");
  expect_rejected(R"({"messages": [{"content": "x"}]})", "messages[0].role", "required");
  expect_rejected(R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].role", "not supported");
  expect_rejected(R"({"messages": [{"role": "user"}]})", "messages[0].content", "required");
  expect_rejected(R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "string or an array");
  expect_rejected(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
                  "messages[0].content[0].type", "not supported");
  expect_rejected("{" + kHello + R"(, "temperature": "hot"})", "temperature", "must be a number, got string");
  expect_rejected("{" + kHello + R"(, "temperature": true})", "temperature", "must be a number, got boolean");
  expect_rejected("{" + kHello + R"(, "temperature": 2.5})", "temperature", "between 0 and 2");
  expect_rejected("{" + kHello + R"(, "top_p": 1.5})", "top_p", "between 0 and 1");
  expect_rejected("{" + kHello + R"(, "max_tokens": 0})", "max_tokens", "between 1 and");
  expect_rejected("{" + kHello + R"(, "max_tokens": 2.5})", "max_tokens", "must be an integer");
  expect_rejected("{" + kHello + R"(, "max_tokens": "10"})", "max_tokens", "must be an integer, got string");
  expect_rejected("{" + kHello + R"(, "top_k": -1})", "top_k", "between 0 and");
  expect_rejected("{" + kHello + R"(, "seed": 1.5})", "seed", "must be an integer");
  expect_rejected("{" + kHello + R"(, "stream": "yes"})", "stream", "must be a boolean");
  expect_rejected("{" + kHello + R"(, "stop": 7})", "stop", "string or an array");
  expect_rejected("{" + kHello + R"(, "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4");
  expect_rejected("{" + kHello + R"(, "stop": [""]})", "stop", "must not be empty");
  expect_rejected("{" + kHello + R"(, "model": 3})", "model", "must be a string");
  expect_rejected("{" + kHello + R"(, "stream_options": {"include_usage": true}})", "stream_options", "only allowed");
  expect_rejected("{" + kHello + R"(, "stream": true, "stream_options": {"include_usage": 1}})",
                  "stream_options.include_usage", "boolean");
  expect_rejected("{" + kHello + R"(, "presence_penalty": 5})", "presence_penalty", "between -2 and 2");
}

TEST(CompletionRequest, UnsupportedFeaturesAreRefused) {
  expect_rejected("{" + kHello + R"(, "n": 2})", "n", "must be 1");
  expect_rejected("{" + kHello + R"(, "logprobs": true})", "logprobs", "not supported");
  expect_rejected("{" + kHello + R"(, "tools": [{"type": "function"}]})", "tools", "not supported");
  expect_rejected("{" + kHello + R"(, "logit_bias": {"50256": -100}})", "logit_bias", "not supported");
  expect_rejected("{" + kHello + R"(, "response_format": {"type": "json_object"}})", "response_format",
                  "not supported");
  expect_rejected(R"({"prompt": "x", "echo": true})", "echo", "not supported", Endpoint::Completions);
  expect_rejected(R"({"prompt": "x", "logprobs": 2})", "logprobs", "not supported", Endpoint::Completions);
  expect_rejected(R"({"prompt": "x", "suffix": "y"})", "suffix", "not supported", Endpoint::Completions);
}

TEST(CompletionRequest, CompletionPromptErrors) {
  expect_rejected(R"({"model": "m"})", "prompt", "required", Endpoint::Completions);
  expect_rejected(R"({"prompt": ""})", "prompt", "empty", Endpoint::Completions);
  expect_rejected(R"({"prompt": 5})", "prompt", "string or an array", Endpoint::Completions);
  expect_rejected(R"({"prompt": ["a", "b"]})", "prompt", "one prompt per request", Endpoint::Completions);
  expect_rejected(R"({"prompt": [1, -2]})", "prompt", "non-negative integers", Endpoint::Completions);
  // A chat body on the completions route lacks its prompt.
  expect_rejected("{" + kHello + "}", "prompt", "required", Endpoint::Completions);
}

}  // namespace
}  // namespace cellm::server
