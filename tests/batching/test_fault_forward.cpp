// A forward that fails after the cache placed its cells (the executor's fault hook, between
// prepare and the kernels): the generations in that step fail, nothing the step placed stays,
// no other sequence moves, and every other generation ends with the tokens it has alone.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "batching/cache_recorder.h"
#include "batching/fault_engine.h"
#include "core/error.h"

namespace cellm::batching {
namespace {

using test::fault_request;

TEST(FaultForward, AForwardFailingAfterPrepareAdvancesNothingAndLeaksNothing) {
  // Two sessions run, a third waits for a slot, and a fourth generation finished earlier with
  // keep_cache, so its sequence stays parked in the cache through the failure.
  test::FaultEngine e({.max_sessions = 2, .max_step_tokens = 8});
  test::Results res;
  GenerationRequest parked = fault_request(9, 7, 3);
  parked.keep_cache = true;
  const GenerationId parked_id = e.runner.submit(parked, res.callbacks());
  ASSERT_EQ(res.wait(parked_id).finish_reason, FinishReason::Length);
  e.runner.wait_idle();
  const int64_t parked_cells = e.runner.metrics().kv.live_cells;
  ASSERT_GT(parked_cells, 0);

  // The forward to fail is chosen by what it holds, not by its number (how submissions fall
  // into the first forwards depends on thread timing): the first forward after both running
  // generations have a token. With two session slots the third is still waiting then, and
  // neither running one can have finished (each needs 6 tokens; the second has its first by
  // the third forward). Both hooks run on the engine thread and are set while it is idle.
  std::set<GenerationId> sampled;
  bool injected = false;
  e.runner.set_sample_hook([&sampled](GenerationId id) { sampled.insert(id); });
  e.executor.set_fault_hook([&sampled, &injected] {
    if (injected || sampled.size() < 2) return;
    injected = true;
    throw Error(ErrorCode::Internal, "injected forward failure");
  });
  // The first forward waits until all three are submitted: otherwise the first generation
  // can finish alone before the others arrive, and the failing forward is the last one.
  std::atomic<bool> all_submitted{false};
  test::CacheRecorder recorder;
  recorder.install(e.runner, e.executor.cache(), [&all_submitted](int64_t) {
    while (!all_submitted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::vector<GenerationRequest> reqs = {fault_request(1, 5, 6), fault_request(2, 11, 6), fault_request(3, 4, 6)};
  std::vector<GenerationId> ids;
  for (const auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
  all_submitted = true;
  int failed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const GenerationResult r = res.wait(ids[i]);
    if (r.finish_reason == FinishReason::Failed) {
      EXPECT_NE(r.error.find("injected"), std::string::npos) << r.error;
      ++failed;
      continue;
    }
    EXPECT_EQ(r.finish_reason, FinishReason::Length) << i;
    EXPECT_EQ(r.tokens, test::solo_tokens(reqs[i])) << "generation " << i;
  }
  e.runner.wait_idle();
  EXPECT_EQ(failed, 2);  // the step held the two running sessions; the waiting one was not in it
  EXPECT_EQ(recorder.expect_failed_attempts_changed_nothing(), 1);
  const EngineMetrics m = e.runner.metrics();
  EXPECT_EQ(m.failed_steps, 1);
  EXPECT_EQ(m.kv.live_cells, parked_cells);  // the parked sequence, untouched; nothing else
  e.runner.release(parked_id);
  EXPECT_TRUE(test::eventually([&] { return e.runner.metrics().kv.live_cells == 0; }));
}

}  // namespace
}  // namespace cellm::batching
