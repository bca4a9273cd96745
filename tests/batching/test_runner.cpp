#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <filesystem>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "batching/results.h"
#include "batching/runner.h"
#include "common/test_models.h"
#include "common/tiny_models.h"
#include "core/error.h"
#include "gguf/file.h"
#include "runtime/executor.h"
#include "tokenizer/tokenizer.h"

namespace cellm::batching {
namespace {

struct Engine {
  // `model`: a tiny preset name, or a path to a GGUF file.
  explicit Engine(const std::string& model, RunnerOptions ro = {}, int64_t max_rows = 1 << 20, int32_t max_write = 32)
      : file(gguf::File::open(model.find(".gguf") != std::string::npos ? model : test::tiny_model(model))),
        tokenizer(tokenizer::Tokenizer::from_gguf(*file)),
        backend(2),
        executor(backend, *file, exec_options(max_rows, max_write)),
        runner(executor, *tokenizer, ro) {}
  static runtime::ExecutorOptions exec_options(int64_t max_rows, int32_t max_write) {
    runtime::ExecutorOptions o;
    o.max_write = max_write;
    o.max_decode_batch = 16;
    o.cache.page_cells = 4;
    o.cache.initial_rows = 16;
    o.cache.max_rows = max_rows;
    return o;
  }
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  cpu::CpuBackend backend;
  runtime::Executor executor;
  Runner runner;
};

using test::Results;

GenerationRequest request(int salt, int prompt_len, int max_tokens) {
  GenerationRequest r;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(33 + (i * 7 + salt * 13) % 90);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // random weights: run to max_tokens
  return r;
}

std::vector<int32_t> alone(const std::string& preset, const GenerationRequest& r) {
  Engine e(preset);
  Results res;
  return res.wait(e.runner.submit(r, res.callbacks())).tokens;
}

// Waits for every generation: one that ended cancelled must be among those cancelled; every
// other must run to its length with the tokens `expected(i)` gives. Returns how many compared.
template <typename Expected>
int expect_solo_tokens_unless_cancelled(Results& res, const std::vector<GenerationId>& ids,
                                         const std::vector<bool>& cancelled, Expected expected) {
  int compared = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const GenerationResult r = res.wait(ids[i]);
    if (r.finish_reason == FinishReason::Cancelled) {
      EXPECT_TRUE(cancelled[i]) << "generation " << i;
      continue;
    }
    EXPECT_EQ(r.finish_reason, FinishReason::Length) << "generation " << i << ": " << r.error;
    EXPECT_EQ(r.tokens, expected(i)) << "generation " << i;
    ++compared;
  }
  return compared;
}

TEST(Runner, BatchedGenerationsEqualTheirSoloRuns) {
  Engine e("tiny-llama", {.max_sessions = 8, .max_step_tokens = 12});
  Results res;
  std::vector<GenerationRequest> reqs;
  std::vector<GenerationId> ids;
  for (int i = 0; i < 6; ++i) reqs.push_back(request(i, 5 + 7 * i, 10 + i));
  for (auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
  for (size_t i = 0; i < ids.size(); ++i) {
    const GenerationResult r = res.wait(ids[i]);
    EXPECT_EQ(r.finish_reason, FinishReason::Length);
    EXPECT_EQ(r.tokens.size(), static_cast<size_t>(10 + i));
    EXPECT_EQ(r.tokens, alone("tiny-llama", reqs[i])) << "generation " << i;
    EXPECT_EQ(res.streamed(ids[i]), r.text);
  }
  e.runner.wait_idle();
  const EngineMetrics m = e.runner.metrics();
  EXPECT_GT(m.mixed_steps, 0);  // prompts were prefilled beside others' decodes
  EXPECT_EQ(m.kv.live_cells, 0);
}

TEST(Runner, CancellingOneLeavesTheOthersUnchanged) {
  Engine e("tiny-gemma3", {.max_sessions = 4});
  Results res;
  const GenerationRequest a = request(1, 9, 40), b = request(2, 12, 40);
  // a's first token holds the engine thread until the cancel is in, so the engine sees it before
  // a's next step (else, on a busy machine, a tiny model could finish all 40 tokens first).
  std::promise<void> started, cancel_sent;
  bool signalled = false;
  GenerationCallbacks cb = res.callbacks();
  auto on_token = cb.on_token;
  cb.on_token = [&, on_token](GenerationId id, int32_t t, const std::string& s) {
    on_token(id, t, s);
    if (!signalled) {
      signalled = true;
      started.set_value();
      cancel_sent.get_future().wait();
    }
  };
  const GenerationId ida = e.runner.submit(a, cb);
  const GenerationId idb = e.runner.submit(b, res.callbacks());
  started.get_future().wait();
  e.runner.cancel(ida);
  cancel_sent.set_value();
  const GenerationResult ra = res.wait(ida), rb = res.wait(idb);
  EXPECT_EQ(ra.finish_reason, FinishReason::Cancelled);
  EXPECT_LT(ra.tokens.size(), 40u);
  EXPECT_EQ(rb.finish_reason, FinishReason::Length);
  EXPECT_EQ(rb.tokens, alone("tiny-gemma3", b));
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
}

TEST(Runner, AFailedForwardFailsOnlyItsStep) {
  Engine e("tiny-llama", {.max_sessions = 1});  // one at a time: the failing step holds one generation
  Results res;
  e.runner.set_step_hook([](int64_t step) {
    if (step == 3) throw Error(ErrorCode::Internal, "injected forward failure");
  });
  const GenerationRequest a = request(3, 6, 8), b = request(4, 6, 8);
  const GenerationId ida = e.runner.submit(a, res.callbacks());
  const GenerationId idb = e.runner.submit(b, res.callbacks());
  const GenerationResult ra = res.wait(ida), rb = res.wait(idb);
  EXPECT_EQ(ra.finish_reason, FinishReason::Failed);
  EXPECT_NE(ra.error.find("injected"), std::string::npos);
  EXPECT_EQ(rb.finish_reason, FinishReason::Length);
  EXPECT_EQ(rb.tokens, alone("tiny-llama", b));
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
  EXPECT_EQ(e.runner.metrics().failed_steps, 1);
}

TEST(Runner, StressWithPreemptionAndCancellations) {
  // A pool far too small for 24 sessions at once: admission waits and the youngest sessions
  // are preempted and recomputed, yet every generation ends with its solo tokens.
  Engine e("tiny-llama", {.max_sessions = 24, .max_step_tokens = 16}, /*max_rows=*/96);
  Results res;
  std::mt19937 rng(5);
  std::vector<GenerationRequest> reqs;
  std::vector<GenerationId> ids;
  for (int i = 0; i < 24; ++i) reqs.push_back(request(i, 3 + static_cast<int>(rng() % 30), 4 + static_cast<int>(rng() % 20)));
  for (auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
  std::vector<bool> cancelled(ids.size(), false);
  for (size_t i = 0; i < ids.size(); i += 5) {
    e.runner.cancel(ids[i]);
    cancelled[i] = true;
  }
  const int compared =
      expect_solo_tokens_unless_cancelled(res, ids, cancelled, [&](size_t i) { return alone("tiny-llama", reqs[i]); });
  e.runner.wait_idle();
  const EngineMetrics m = e.runner.metrics();
  EXPECT_GE(compared, 18);
  EXPECT_GT(m.preemptions, 0);
  EXPECT_EQ(m.kv.live_cells, 0);
  EXPECT_LE(m.kv.rows, 96);
}

TEST(Runner, ResumingAConversationReusesItsCache) {
  Engine e("tiny-llama");
  Results res;
  GenerationRequest first = request(8, 20, 6);
  first.keep_cache = true;
  const GenerationId id1 = e.runner.submit(first, res.callbacks());
  const GenerationResult r1 = res.wait(id1);
  // The next turn: the whole conversation so far plus new text.
  GenerationRequest second = first;
  second.keep_cache = false;
  second.resume_from = id1;
  second.prompt.insert(second.prompt.end(), r1.tokens.begin(), r1.tokens.end());
  for (int i = 0; i < 5; ++i) second.prompt.push_back(40 + i);
  const GenerationResult r2 = res.wait(e.runner.submit(second, res.callbacks()));
  EXPECT_GE(r2.reused_prompt_tokens, 20);
  GenerationRequest fresh = second;
  fresh.resume_from = 0;
  EXPECT_EQ(r2.tokens, alone("tiny-llama", fresh));
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
}

// A generation of n tokens alone: a prefill step, then n - 1 decode steps, which the executor
// times phase by phase; the engine's gaps are counted only between decode steps in a row (n - 2
// of them), not after the prefill.
TEST(Runner, CountsTheGapsBetweenDecodeStepsInARow) {
  Engine e("tiny-llama");
  Results res;
  constexpr int kTokens = 6;
  ASSERT_EQ(res.wait(e.runner.submit(request(1, 5, kTokens), res.callbacks())).tokens.size(), size_t{kTokens});
  e.runner.wait_idle();
  const EngineMetrics m = e.runner.metrics();
  EXPECT_EQ(m.prefill_steps, 1);
  EXPECT_EQ(m.decode_steps, kTokens - 1);
  EXPECT_EQ(m.decode_host.steps, kTokens - 1);
  EXPECT_EQ(m.decode_gaps, kTokens - 2);
  EXPECT_GT(m.decode_gap_seconds, 0.0);
}

TEST(Runner, RefusesBadRequestsAtSubmit) {
  Engine e("tiny-llama", {.max_waiting = 2, .context_length = 64});
  Results res;
  GenerationRequest empty;
  EXPECT_THROW(e.runner.submit(empty, res.callbacks()), Error);
  try {
    e.runner.submit(request(0, 64, 4), res.callbacks());
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::LimitExceeded);
    EXPECT_NE(std::string(err.what()).find("context length is 64"), std::string::npos) << err.what();
  }
  GenerationRequest bad = request(0, 4, 4);
  bad.sampling.top_p = 0;
  EXPECT_THROW(e.runner.submit(bad, res.callbacks()), Error);
  EXPECT_EQ(e.runner.metrics().rejected, 3);
}

TEST(Runner, QueueBoundCountsEveryAcceptedGenerationAtOnce) {
  // Two sessions, one waiting place. The engine is held inside the forward of a first
  // generation, so it neither moves new submissions to its queue nor publishes anything: the
  // bound must still count what was accepted. One more runs beside the first, one waits; a
  // fourth is refused.
  Engine e("tiny-llama", {.max_sessions = 2, .max_waiting = 1});
  std::atomic<bool> hold{true}, entered{false};
  e.runner.set_step_hook([&](int64_t) {
    entered = true;
    while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  Results res;
  std::vector<GenerationId> ids = {e.runner.submit(request(0, 5, 8), res.callbacks())};
  while (!entered.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto accepted = [&](int salt) {
    try {
      ids.push_back(e.runner.submit(request(salt, 5, 8), res.callbacks()));
      return true;
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::LimitExceeded) << err.what();
      return false;
    }
  };
  EXPECT_TRUE(accepted(1)) << "refused although a session is free";
  EXPECT_TRUE(accepted(2)) << "refused although the waiting place is free";
  EXPECT_FALSE(accepted(3)) << "accepted with two sessions and one waiting place taken";
  hold = false;
  for (GenerationId id : ids) EXPECT_EQ(res.wait(id).finish_reason, FinishReason::Length);
  // All ended: the places are free again.
  EXPECT_EQ(res.wait(e.runner.submit(request(3, 5, 8), res.callbacks())).finish_reason, FinishReason::Length);
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().rejected, 1);
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
}

// The same properties on the real default model (issue #6's acceptance runs on SmolLM2).
class DefaultModelRunner : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = test::model_path(test::kSmolLM2);
    if (!std::filesystem::exists(path_)) {
      if (test::models_required()) FAIL() << "model " << path_ << " is missing (CI requires it)";
      GTEST_SKIP() << "model " << path_ << " is missing; run scripts/fetch-models";
    }
    solo_ = std::make_unique<Engine>(path_, RunnerOptions{.max_sessions = 1});
  }
  // A prompt of `words` random words, tokenized (no template: the runner does not care).
  GenerationRequest words_request(std::mt19937& rng, int words, int max_tokens) {
    static const char* kWords[] = {"river", "city", "blue", "train", "music", "old", "garden", "paper", "light",
                                   "stone", "window", "quiet", "north", "bread", "cloud", "story"};
    std::string text = "Tell me about";
    for (int i = 0; i < words; ++i) text += std::string(" ") + kWords[rng() % 16];
    GenerationRequest r;
    r.prompt = solo_->tokenizer->encode(text);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }
  std::vector<int32_t> solo(const GenerationRequest& r) {
    Results res;
    return res.wait(solo_->runner.submit(r, res.callbacks())).tokens;
  }
  std::string path_;
  std::unique_ptr<Engine> solo_;
};

TEST_F(DefaultModelRunner, CancelFreesCellsAndLeavesOthersUnchanged) {
  Engine e(path_, {.max_sessions = 4});
  std::mt19937 rng(1);
  const GenerationRequest a = words_request(rng, 10, 48), b = words_request(rng, 14, 24);
  Results res;
  std::promise<void> midway;
  int seen = 0;
  GenerationCallbacks cb = res.callbacks();
  auto on_token = cb.on_token;
  cb.on_token = [&, on_token](GenerationId id, int32_t t, const std::string& s) {
    on_token(id, t, s);
    if (++seen == 8) midway.set_value();
  };
  const GenerationId ida = e.runner.submit(a, cb);
  const GenerationId idb = e.runner.submit(b, res.callbacks());
  midway.get_future().wait();
  e.runner.cancel(ida);
  EXPECT_EQ(res.wait(ida).finish_reason, FinishReason::Cancelled);
  const GenerationResult rb = res.wait(idb);
  EXPECT_EQ(rb.tokens, solo(b));
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
}

TEST_F(DefaultModelRunner, AForcedForwardFailureFailsOnlyThatStep) {
  // Two sessions run, a third waits for a free slot. Attempt 5 (a decode step of the first
  // two) fails: those two fail, the third then runs to its solo tokens, nothing leaks.
  Engine e(path_, {.max_sessions = 2, .max_step_tokens = 32});
  std::mt19937 rng(2);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(words_request(rng, 4 + 3 * i, 12));
  e.runner.set_step_hook([](int64_t attempt) {
    if (attempt == 5) throw Error(ErrorCode::Internal, "injected forward failure");
  });
  Results res;
  std::vector<GenerationId> ids;
  for (auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
  for (int i = 0; i < 2; ++i) {
    const GenerationResult r = res.wait(ids[i]);
    EXPECT_EQ(r.finish_reason, FinishReason::Failed) << i;
    EXPECT_NE(r.error.find("injected"), std::string::npos);
  }
  const GenerationResult third = res.wait(ids[2]);
  EXPECT_EQ(third.finish_reason, FinishReason::Length);
  EXPECT_EQ(third.tokens, solo(reqs[2]));
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
  EXPECT_EQ(e.runner.metrics().failed_steps, 1);
}

TEST_F(DefaultModelRunner, StressOf64SessionsWithASmallPool) {
  // 64 sessions, random prompt lengths, random cancellations and a pool limit far below what
  // they need together: admission waits, the youngest are preempted and recomputed, and every
  // generation that was not cancelled ends with the tokens it has alone.
  Engine e(path_, {.max_sessions = 64, .max_step_tokens = 64}, /*max_rows=*/512, /*max_write=*/64);
  std::mt19937 rng(3);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 64; ++i) reqs.push_back(words_request(rng, 2 + static_cast<int>(rng() % 30), 4 + static_cast<int>(rng() % 12)));
  Results res;
  std::vector<GenerationId> ids;
  for (auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
  std::vector<bool> cancelled(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    if (rng() % 6 == 0) {
      e.runner.cancel(ids[i]);
      cancelled[i] = true;
    }
  const int compared = expect_solo_tokens_unless_cancelled(res, ids, cancelled, [&](size_t i) { return solo(reqs[i]); });
  e.runner.wait_idle();
  const EngineMetrics m = e.runner.metrics();
  EXPECT_GE(compared, 40);
  EXPECT_GT(m.preemptions, 0);
  EXPECT_EQ(m.kv.live_cells, 0);
  EXPECT_LE(m.kv.rows, 512);
}

}  // namespace
}  // namespace cellm::batching
