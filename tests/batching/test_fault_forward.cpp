// A forward that fails after the cache placed its cells (the executor's fault hook, between
// prepare and the kernels): the generations in that step fail, nothing the step placed stays,
// no other sequence moves, and every other generation ends with the tokens it has alone.
#include <gtest/gtest.h>

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

  int forwards = 0;
  e.executor.set_fault_hook([&forwards] {  // set while the engine thread is idle
    if (++forwards == 4) throw Error(ErrorCode::Internal, "injected forward failure");
  });
  test::CacheRecorder recorder;
  recorder.install(e.runner, e.executor.cache());
  std::vector<GenerationRequest> reqs = {fault_request(1, 5, 6), fault_request(2, 11, 6), fault_request(3, 4, 6)};
  std::vector<GenerationId> ids;
  for (const auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
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
