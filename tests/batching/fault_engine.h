#pragma once
// A runner over a tiny random model on the CPU whose KV storage can refuse to grow
// (faulty_backend.h), the results it delivers, and what each request yields alone on a
// fault-free engine: the shared parts of the fault-injection tests.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/faulty_backend.h"
#include "batching/results.h"
#include "batching/runner.h"
#include "common/tiny_models.h"
#include "gguf/file.h"
#include "runtime/executor.h"
#include "tokenizer/tokenizer.h"

namespace cellm::test {

struct FaultEngine {
  explicit FaultEngine(batching::RunnerOptions ro = {}, int64_t initial_rows = 64, int32_t max_write = 32)
      : file(gguf::File::open(tiny_model("tiny-llama"))),
        tokenizer(tokenizer::Tokenizer::from_gguf(*file)),
        backend(2),
        executor(backend, *file, options(initial_rows, max_write)),
        runner(executor, *tokenizer, ro) {}
  static runtime::ExecutorOptions options(int64_t initial_rows, int32_t max_write) {
    runtime::ExecutorOptions o;
    o.max_write = max_write;
    o.max_decode_batch = 16;
    o.cache.page_cells = 4;
    o.cache.initial_rows = initial_rows;
    return o;
  }
  kv::FaultyStorage& storage() { return *backend.storage(); }

  std::unique_ptr<gguf::File> file;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  FaultyBackend backend;
  runtime::Executor executor;
  batching::Runner runner;
};

// Polls `done` for up to `limit` (for what the engine thread does without a caller waiting).
template <class Predicate>
bool eventually(Predicate done, std::chrono::seconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A prompt of `len` tokens (distinct per salt) run to exactly `max_tokens` tokens.
inline batching::GenerationRequest fault_request(int salt, int len, int max_tokens) {
  batching::GenerationRequest r;
  for (int i = 0; i < len; ++i) r.prompt.push_back(33 + (i * 7 + salt * 13) % 90);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // random weights: run to max_tokens
  return r;
}

// The tokens `r` yields alone on an engine without faults.
inline std::vector<int32_t> solo_tokens(const batching::GenerationRequest& r) {
  FaultEngine e;
  Results res;
  return res.wait(e.runner.submit(r, res.callbacks())).tokens;
}

// Submits `requests` together and checks that each ends by length with the tokens of its solo
// run. False when one did not end within `limit`: the runner is stuck, so the caller must not
// wait for it to go idle.
inline bool expect_solo_runs(batching::Runner& runner, const std::vector<batching::GenerationRequest>& requests,
                             Results& res, std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<batching::GenerationId> ids;
  for (const auto& r : requests) ids.push_back(runner.submit(r, res.callbacks()));
  for (size_t i = 0; i < ids.size(); ++i) {
    const batching::GenerationResult r = res.wait(ids[i], limit);
    if (r.id != ids[i]) return false;  // wait() reported the time-out
    EXPECT_EQ(r.finish_reason, batching::FinishReason::Length) << r.error;
    EXPECT_EQ(r.tokens, solo_tokens(requests[i])) << "generation " << i;
  }
  return true;
}

}  // namespace cellm::test
