#include <gtest/gtest.h>

#include "server/completion_response.h"
#include "server/sse.h"

namespace cellm::server {
namespace {

using nlohmann::json;

ResponseHead head_of(Endpoint endpoint) {
  ResponseHead h = new_response_head(endpoint, "smol");
  h.created = 1700000000;
  return h;
}

TEST(CompletionResponse, HeadsHaveDistinctIdsWithTheEndpointsPrefix) {
  const ResponseHead a = new_response_head(Endpoint::ChatCompletions, "m");
  const ResponseHead b = new_response_head(Endpoint::ChatCompletions, "m");
  EXPECT_EQ(a.id.rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(new_response_head(Endpoint::Completions, "m").id.rfind("cmpl-", 0), 0u);
  EXPECT_GT(a.created, 1600000000);
}

TEST(CompletionResponse, ChatCompletionObject) {
  const json j = completion_response(head_of(Endpoint::ChatCompletions), "Paris.", "stop", {12, 3});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "smol");
  EXPECT_EQ(j["created"], 1700000000);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "Paris."}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 12}, {"completion_tokens", 3}, {"total_tokens", 15}}));
}

TEST(CompletionResponse, TextCompletionObject) {
  const json j = completion_response(head_of(Endpoint::Completions), " a time", "length", {4, 2});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], " a time");
  EXPECT_FALSE(j["choices"][0].contains("message"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(CompletionResponse, ChatChunks) {
  const ResponseHead h = head_of(Endpoint::ChatCompletions);
  const json role = role_chunk(h, false);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], h.id);
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(role.contains("usage"));
  const json text = text_chunk(h, "Par", true);
  EXPECT_EQ(text["choices"][0]["delta"], json({{"content", "Par"}}));
  EXPECT_TRUE(text["usage"].is_null());  // include_usage: null until the last chunk
  const json finish = finish_chunk(h, "stop", false);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  const json usage = usage_chunk(h, {5, 2});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(CompletionResponse, CompletionChunksCarryText) {
  const ResponseHead h = head_of(Endpoint::Completions);
  const json text = text_chunk(h, "ab", false);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "ab");
  EXPECT_FALSE(text["choices"][0].contains("delta"));
  EXPECT_EQ(finish_chunk(h, "length", false)["choices"][0]["text"], "");
}

TEST(CompletionResponse, FinishReasonsAndGenerationErrors) {
  batching::GenerationResult r;
  r.finish_reason = batching::FinishReason::Stop;
  EXPECT_EQ(openai_finish_reason(r.finish_reason), "stop");
  EXPECT_FALSE(generation_error(r).has_value());
  r.finish_reason = batching::FinishReason::Length;
  EXPECT_EQ(openai_finish_reason(r.finish_reason), "length");
  EXPECT_FALSE(generation_error(r).has_value());

  r.finish_reason = batching::FinishReason::Cancelled;
  EXPECT_FALSE(openai_finish_reason(r.finish_reason).has_value());
  const auto cancelled = generation_error(r);
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ(cancelled->status(), 503);
  EXPECT_GT(cancelled->retry_after_seconds(), 0);

  r.finish_reason = batching::FinishReason::Failed;
  r.error = "forward failed: out of device memory";
  const auto failed = generation_error(r);
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->status(), 500);
  EXPECT_NE(std::string(failed->what()).find("out of device memory"), std::string::npos);
  EXPECT_EQ(failed->body()["error"]["type"], "server_error");
}

TEST(CompletionResponse, UsageCountsGeneratedTokens) {
  batching::GenerationResult r;
  r.prompt_tokens = 9;
  r.tokens = {1, 2, 3};
  const Usage u = usage_of(r);
  EXPECT_EQ(u.prompt_tokens, 9);
  EXPECT_EQ(u.completion_tokens, 3);
}

TEST(CompletionResponse, ModelList) {
  const json j = models_response("SmolLM2", 0);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "SmolLM2");
  EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST(ApiErrorBody, OpenAIShape) {
  const ApiError e(400, "invalid_request_error", "'temperature' must be a number", "temperature");
  EXPECT_EQ(e.body(), json({{"error",
                             {{"message", "'temperature' must be a number"},
                              {"type", "invalid_request_error"},
                              {"param", "temperature"},
                              {"code", nullptr}}}}));
  EXPECT_TRUE(error_body("server_error", "x")["error"]["param"].is_null());
}

TEST(Sse, EventFraming) {
  EXPECT_EQ(sse_event(json({{"a", "line1\nline2"}})), "data: {\"a\":\"line1\\nline2\"}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Sse, InvalidUtf8BecomesReplacementCharacter) {
  const std::string event = sse_event(json({{"t", std::string("ok\xff")}}));
  EXPECT_EQ(event, "data: {\"t\":\"ok\xEF\xBF\xBD\"}\n\n");
  EXPECT_EQ(json::parse(event.substr(6))["t"], "ok\xEF\xBF\xBD");
}

}  // namespace
}  // namespace cellm::server
