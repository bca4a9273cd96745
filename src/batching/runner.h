#pragma once
// The runner: one engine thread owns the executor and turns submitted generations into
// forwards (scheduler), samples their tokens, streams them through callbacks and finishes them
// (stop, length, cancelled, failed). submit() and cancel() may be called from any thread.
//
// Memory: a waiting generation is admitted when the pool can still grow to hold its first
// slice beside the running decode rows; when it cannot, new work waits, and when running
// sessions cannot continue the youngest is preempted (its cells freed, its tokens recomputed
// later). A storage that refuses to grow (OutOfMemory) makes the pool's present size the
// limit until a generation ends. A forward that fails for another reason fails the
// generations of that step only; a token that cannot be picked fails its generation only.
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "batching/engine_metrics.h"
#include "batching/generation.h"
#include "batching/scheduler.h"
#include "batching/session.h"
#include "core/thread_pool.h"
#include "runtime/executor.h"
#include "tokenizer/tokenizer.h"

namespace cellm::batching {

struct RunnerOptions {
  int32_t max_sessions = 16;        // generations in the cache at once
  int32_t max_waiting = 1024;       // generations that may wait for a session; submit() refuses more
  int32_t max_step_tokens = 0;      // tokens per forward; 0 = the executor's max_write
  int32_t context_length = 0;       // tokens per session (prompt + output); 0 = the model's
};

class Runner {
 public:
  Runner(runtime::Executor& executor, const tokenizer::Tokenizer& tokenizer, RunnerOptions options);
  ~Runner();  // cancels what is left and joins the engine thread
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Queues a generation. Throws InvalidArgument (empty prompt, bad sampling), LimitExceeded
  // (prompt longer than the context, waiting queue full) before anything is queued.
  GenerationId submit(GenerationRequest request, GenerationCallbacks callbacks);
  // Cancels a queued or running generation; its on_finish reports Cancelled. Unknown or
  // finished ids are ignored.
  void cancel(GenerationId id);
  // Frees the cells a keep_cache generation left parked. Unknown ids are ignored.
  void release(GenerationId id);
  // Blocks until nothing is queued or running.
  void wait_idle();
  EngineMetrics metrics() const;
  const RunnerOptions& options() const { return options_; }
  // Test hook: runs on the engine thread before each forward with the attempt number (0, 1,
  // ... counting failed forwards too); what it throws fails that step.
  void set_step_hook(std::function<void(int64_t step)> hook);
  // Test hook: runs on the engine thread before a generation's token is picked from a forward
  // (sampled, or taken from the device's argmax); what it throws fails that generation only,
  // as a sampler failure would.
  void set_sample_hook(std::function<void(GenerationId id)> hook);

 private:
  void loop();
  void take_submissions();  // under mutex_
  void admit();
  bool run_one_step();
  void preempt(Session& s);
  void resume(Session& s);
  bool evict_parked();  // frees the oldest parked sequence; false when none
  // Whether a step with these demands can run: within max_rows and, after the storage refused
  // to grow, within the rows the pool has now.
  bool fits(const std::vector<kv::Demand>& demands) const;
  void finish(Session& s, FinishReason reason, const std::string& error = {});
  void emit_token(Session& s, int32_t token);
  // Picks the token of each generation that owns a logit row of the step (drawn in parallel
  // when sampled), then hands them out in order.
  void pick_and_emit(const std::vector<Session*>& owners, const runtime::StepResult& result, bool greedy);
  void drop_finished();
  void publish_metrics();  // copies metrics_ to snapshot_
  std::vector<kv::Demand> demands_of(const StepPlan& plan) const;

  runtime::Executor& executor_;
  const tokenizer::Tokenizer& tokenizer_;
  RunnerOptions options_;
  Scheduler scheduler_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::unique_ptr<Session>> submitted_;  // handed over under mutex_
  std::vector<GenerationId> cancels_;
  std::vector<GenerationId> releases_;
  bool stop_ = false;
  bool busy_ = false;
  GenerationId next_id_ = 1;
  std::function<void(int64_t)> step_hook_;
  std::function<void(int64_t)> step_hook_copy_;  // engine thread's copy
  std::function<void(GenerationId)> sample_hook_;
  std::function<void(GenerationId)> sample_hook_copy_;  // engine thread's copy
  int64_t unfinished_ = 0;                       // accepted generations not finished yet, under mutex_

  // Engine-thread state.
  std::deque<std::unique_ptr<Session>> waiting_;
  std::vector<std::unique_ptr<Session>> running_;
  struct Parked {
    kv::SeqId seq;
    std::vector<int32_t> tokens;  // what the cache holds for seq
  };
  std::map<GenerationId, Parked> parked_;  // by generation id; lower ids are older
  int64_t admissions_ = 0;
  // Set when the storage failed to grow (OutOfMemory): until a generation ends and gives cells
  // back, the pool's present rows are the limit. Retrying the growth sooner would fail again,
  // preempt the same youngest session, readmit it and fail again, forever.
  bool growth_refused_ = false;
  // When the last forward returned, if it was a decode step (engine thread): the time from there
  // to the next decode step's forward is the engine's share of the gap between two steps.
  std::optional<Clock::time_point> decode_returned_;
  int64_t submitted_count_ = 0;  // under mutex_
  int64_t rejected_count_ = 0;   // under mutex_
  // Threads that draw the sampled tokens of one step side by side: the backend's host threads,
  // or, when its kernels run on a device, a pool of the runner's own; both looked up or made at
  // the first step that draws several (engine thread only).
  std::unique_ptr<ThreadPool> own_sampling_threads_;
  ThreadPool* sampling_threads_ = nullptr;
  EngineMetrics metrics_;   // engine thread only
  EngineMetrics snapshot_;  // what metrics() returns; under mutex_
  std::thread thread_;
};

}  // namespace cellm::batching
