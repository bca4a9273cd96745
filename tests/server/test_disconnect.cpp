// A client that leaves at each stage of its request, on the real server and the default
// model: queued before admission, during prefill, mid-decode of a stream, after the last
// token but before the final chunk, and a non-streaming request. The engine is held at the
// stage (engine_gate.h) while the client closes its socket and the server notices, then let
// go. Each time: the generation stops there, no cell stays live, and another generation
// running beside it answers exactly what it answers alone.
#include <gtest/gtest.h>

#if CELLM_HAVE_HTTP_SERVER

#include <atomic>
#include <future>
#include <memory>
#include <regex>
#include <thread>

#include "batching/engine.h"
#include "common/test_models.h"
#include "server/completion_service.h"
#include "server/engine_gate.h"
#include "server/http/http_server.h"
#include "server/raw_http_client.h"
#include "server/server_metrics.h"

namespace cellm::server {
namespace {

using nlohmann::json;
using test::RawHttpClient;

const json kCompanion = {{"prompt", "The capital of France is"}, {"max_tokens", 8}, {"temperature", 0}};
const json kStory = {{"messages", {{{"role", "user"}, {"content", "Write a long story about a dragon."}}}},
                     {"max_tokens", 48},
                     {"temperature", 0}};

json with(json body, const char* key, json value) {
  body[key] = std::move(value);
  return body;
}

template <class Predicate>
bool eventually(Predicate done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class Disconnect : public ::testing::Test {
 protected:
  void SetUp() override {
    CELLM_REQUIRE_MODEL(path, test::kSmolLM2);
    path_ = path;
  }
  void start(int max_sessions, int max_step_tokens = 64) {
    batching::EngineOptions o;
    o.model_path = path_;
    o.backend.name = "cpu";
    o.backend.threads = 2;
    o.executor.max_write = max_step_tokens;
    o.executor.max_decode_batch = 8;
    o.runner.max_sessions = max_sessions;
    o.runner.max_step_tokens = max_step_tokens;
    o.runner.context_length = 512;
    engine_ = std::make_unique<batching::Engine>(o);
    metrics_ = std::make_unique<ServerMetrics>();
    service_ = std::make_unique<CompletionService>(*engine_, batching::PromptOptions{}, "smollm2", *metrics_);
    ServeOptions so;
    so.port = 0;
    http_ = std::make_unique<HttpServer>(*engine_, *service_, *metrics_, so);
    port_ = http_->start();
    const json alone = whole("/v1/completions", kCompanion);  // before any fault
    ASSERT_TRUE(alone.contains("usage")) << alone.dump();
    companion_ = text_of(alone);
    companion_tokens_ = alone["usage"]["completion_tokens"];
    companion_prompt_ = alone["usage"]["prompt_tokens"];
  }
  void TearDown() override {
    gate_.release();
    if (http_) http_->shutdown(std::chrono::seconds(2));
    http_.reset();
    service_.reset();
    metrics_.reset();
    engine_.reset();
  }

  batching::Runner& runner() { return engine_->runner(); }
  // The engine stops at every forward while the gate is held.
  void gate_steps() {
    runner().set_step_hook([this](int64_t) { gate_.pass(); });
  }
  // The engine stops before the `pick`-th token (1-based) of generation `id` is picked.
  void gate_pick(batching::GenerationId id, int pick) {
    // The count lives here: the runner copies its hook at every turn of its loop.
    runner().set_sample_hook([this, id, pick](batching::GenerationId g) {
      if (g == id && ++picks_ == pick) gate_.pass();
    });
  }
  // The id the next submission gets (ids count up from 1 in submission order).
  batching::GenerationId next_id() { return runner().metrics().submitted + 1; }

  // A whole non-streaming answer.
  json whole(const std::string& path, const json& body) {
    RawHttpClient c(port_, path, body);
    const json j = test::body_of(c.read_all());
    if (!j.contains("choices")) ADD_FAILURE() << "no answer: " << c.received();
    return j;
  }
  static std::string text_of(const json& j) {
    if (!j.contains("choices")) return {};
    const json& choice = j["choices"][0];
    return choice.contains("text") ? choice["text"].get<std::string>() : choice["message"]["content"].get<std::string>();
  }
  std::string answer(const std::string& path, const json& body) { return text_of(whole(path, body)); }
  std::future<std::string> companion_async() {
    return std::async(std::launch::async, [this] { return answer("/v1/completions", kCompanion); });
  }
  // Sends and waits until the runner has it (queued or admitted).
  std::unique_ptr<RawHttpClient> submit(const std::string& path, const json& body) {
    const int64_t before = runner().metrics().submitted;
    auto c = std::make_unique<RawHttpClient>(port_, path, body);
    EXPECT_TRUE(eventually([&] { return runner().metrics().submitted > before; }));
    return c;
  }

  // A sample of /metrics (0 when absent).
  int64_t server_counter(const std::string& sample) {
    const std::string text = "\n" + metrics_->render(runner().metrics());
    const size_t at = text.find("\n" + sample + " ");
    return at == std::string::npos ? 0 : std::stoll(text.substr(at + sample.size() + 2));
  }
  int64_t disconnects() { return server_counter("cellm_client_disconnects_total"); }
  // The client leaves; returns once the server noticed and cancelled.
  void leave(RawHttpClient& client) {
    const int64_t before = disconnects();
    client.close_now();
    ASSERT_TRUE(eventually([&] { return disconnects() == before + 1; })) << "the server never noticed";
  }

  // The engine's figures once nothing runs or waits (they are published at the end of each
  // turn of the runner's loop, so a result can arrive before its figures do).
  batching::EngineMetrics idle_metrics() {
    EXPECT_TRUE(eventually([&] {
      const batching::EngineMetrics m = runner().metrics();
      return m.running == 0 && m.waiting == 0;
    }));
    return runner().metrics();
  }

  // Nothing runs, waits or holds a cell any more, and the server still answers as before.
  void expect_clean() {
    EXPECT_TRUE(eventually([&] {
      const batching::EngineMetrics m = runner().metrics();
      return m.running == 0 && m.waiting == 0 && m.kv.live_cells == 0 && m.kv.sequences == 0;
    })) << metrics_->render(runner().metrics());
    EXPECT_EQ(answer("/v1/completions", kCompanion), companion_);
  }

  std::string path_;
  std::unique_ptr<batching::Engine> engine_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<CompletionService> service_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
  std::string companion_;  // what the companion request answers alone
  int64_t companion_tokens_ = 0;
  int64_t companion_prompt_ = 0;
  test::EngineGate gate_;
  std::atomic<int> picks_{0};
};

TEST_F(Disconnect, QueuedBeforeAdmission) {
  start(/*max_sessions=*/1);
  gate_steps();
  gate_.hold();
  const batching::EngineMetrics before = idle_metrics();
  auto companion = companion_async();
  ASSERT_TRUE(gate_.wait_blocked());  // the companion holds the only session
  auto client = submit("/v1/chat/completions", with(kStory, "stream", true));
  ASSERT_TRUE(gate_.step());  // the engine has now queued it behind the companion...
  ASSERT_TRUE(gate_.step());  // ...and published so (metrics lag one turn of the loop)
  EXPECT_EQ(runner().metrics().waiting, 1);
  EXPECT_EQ(runner().metrics().running, 1);
  leave(*client);
  gate_.release();
  EXPECT_EQ(companion.get(), companion_);
  expect_clean();
  // It never reached the cache: only the companion's prompt and tokens were computed.
  const batching::EngineMetrics after = idle_metrics();
  EXPECT_EQ(after.generated_tokens - before.generated_tokens, 2 * companion_tokens_);  // now and in expect_clean
  EXPECT_EQ(after.finished - before.finished, 3);
}

TEST_F(Disconnect, DuringPrefill) {
  start(/*max_sessions=*/2, /*max_step_tokens=*/16);
  gate_steps();
  std::string prompt;
  for (int i = 0; i < 60; ++i) prompt += " word";
  const json long_prompt = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}};
  gate_.hold();
  const batching::EngineMetrics before = idle_metrics();
  auto companion = companion_async();
  ASSERT_TRUE(gate_.wait_blocked());
  auto client = submit("/v1/completions", long_prompt);
  ASSERT_TRUE(gate_.step());  // companion prefilled; the long prompt admitted
  ASSERT_TRUE(gate_.step());  // its first slice ran beside the companion's decode row
  const int64_t prefilled = runner().metrics().prompt_tokens - before.prompt_tokens;
  leave(*client);
  gate_.release();
  EXPECT_EQ(companion.get(), companion_);
  const batching::EngineMetrics after = idle_metrics();
  EXPECT_GT(prefilled, companion_prompt_);  // the long prompt had started...
  EXPECT_LT(after.prompt_tokens - before.prompt_tokens, companion_prompt_ + 60);  // ...and never finished
  EXPECT_EQ(after.generated_tokens - before.generated_tokens, companion_tokens_);  // the companion's only
  expect_clean();
}

TEST_F(Disconnect, MidDecodeWhileStreaming) {
  start(/*max_sessions=*/2);
  const batching::EngineMetrics before = idle_metrics();
  auto companion = companion_async();
  ASSERT_TRUE(eventually([&] { return runner().metrics().submitted > before.submitted; }));
  const batching::GenerationId id = next_id();
  gate_pick(id, 4);
  gate_.hold();
  auto client = submit("/v1/chat/completions", with(kStory, "stream", true));
  ASSERT_TRUE(gate_.wait_blocked());  // three tokens streamed, the fourth not picked yet
  ASSERT_TRUE(client->read_until([](const std::string& r) { return !test::sse_text(r).empty(); }));
  leave(*client);
  gate_.release();
  EXPECT_EQ(companion.get(), companion_);
  const batching::EngineMetrics after = idle_metrics();
  // The story stopped at its fourth token (picked before the cancel was seen), not at 48.
  EXPECT_EQ(after.generated_tokens - before.generated_tokens, companion_tokens_ + 4);
  expect_clean();
}

TEST_F(Disconnect, AfterTheLastTokenBeforeTheFinalChunk) {
  start(/*max_sessions=*/2);
  // Alone first: the answer ends by itself (end-of-generation token), after n tokens.
  const json ask = {{"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
                    {"max_tokens", 32},
                    {"temperature", 0}};
  RawHttpClient alone(port_, "/v1/chat/completions", ask);
  const json whole = test::body_of(alone.read_all());
  ASSERT_EQ(whole["choices"][0]["finish_reason"], "stop") << whole.dump();
  const std::string text = whole["choices"][0]["message"]["content"];
  const int n = whole["usage"]["completion_tokens"];

  const batching::EngineMetrics before = idle_metrics();
  auto companion = companion_async();
  ASSERT_TRUE(eventually([&] { return runner().metrics().submitted > before.submitted; }));
  gate_pick(next_id(), n + 1);  // the pick that finds the end-of-generation token
  gate_.hold();
  auto client = submit("/v1/chat/completions", with(ask, "stream", true));
  ASSERT_TRUE(gate_.wait_blocked());
  ASSERT_TRUE(client->read_until([&](const std::string& r) { return test::sse_text(r) == text; }))
      << client->received();
  EXPECT_EQ(client->received().find("finish_reason\":\"stop"), std::string::npos);  // no final chunk yet
  leave(*client);
  gate_.release();
  EXPECT_EQ(companion.get(), companion_);
  const batching::EngineMetrics after = idle_metrics();
  EXPECT_EQ(after.generated_tokens - before.generated_tokens, companion_tokens_ + n);
  expect_clean();
}

TEST_F(Disconnect, NonStreamingRequest) {
  start(/*max_sessions=*/2);
  const batching::EngineMetrics before = idle_metrics();
  auto companion = companion_async();
  ASSERT_TRUE(eventually([&] { return runner().metrics().submitted > before.submitted; }));
  gate_pick(next_id(), 4);
  gate_.hold();
  auto client = submit("/v1/chat/completions", kStory);
  ASSERT_TRUE(gate_.wait_blocked());
  leave(*client);
  gate_.release();
  EXPECT_EQ(companion.get(), companion_);
  const batching::EngineMetrics after = idle_metrics();
  EXPECT_EQ(after.generated_tokens - before.generated_tokens, companion_tokens_ + 4);
  // Answered (to nobody) as 499, "client closed request", in the request counts.
  EXPECT_EQ(server_counter("cellm_requests_total{endpoint=\"/v1/chat/completions\",status=\"499\"}"), 1);
  expect_clean();
}

}  // namespace
}  // namespace cellm::server

#else
TEST(Disconnect, NeedsTheHttpServer) { GTEST_SKIP() << "cellm was built without cpp-httplib"; }
#endif
