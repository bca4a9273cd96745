// The KV storage refusing to grow (OutOfMemory from kv::FaultyStorage, as an exhausted device
// would): the step is refused with nothing advanced, the youngest session makes room and is
// recomputed later, and every generation still ends with the tokens it has alone.
#include <gtest/gtest.h>

#include "batching/cache_recorder.h"
#include "batching/fault_engine.h"

namespace cellm::batching {
namespace {

using test::fault_request;

// Three generations that fit one at a time in 16 rows (pages of 4) but not together.
std::vector<GenerationRequest> three_small() {
  return {fault_request(1, 5, 6), fault_request(2, 6, 5), fault_request(3, 4, 7)};
}

TEST(FaultGrowth, OneRefusedGrowthPreemptsAndEveryoneStillGetsTheirTokens) {
  test::FaultEngine e({.max_sessions = 3}, /*initial_rows=*/16);
  e.storage().fail_nth_growth(1);
  test::CacheRecorder recorder;
  recorder.install(e.runner, e.executor.cache());
  test::Results res;
  ASSERT_TRUE(test::expect_solo_runs(e.runner, three_small(), res));
  e.runner.wait_idle();
  EXPECT_EQ(e.storage().failed_growths(), 1);
  EXPECT_EQ(recorder.expect_failed_attempts_changed_nothing(), 1);
  const EngineMetrics m = e.runner.metrics();
  EXPECT_EQ(m.failed_steps, 1);
  EXPECT_GE(m.preemptions, 1);
  EXPECT_EQ(m.kv.live_cells, 0);
  EXPECT_GT(m.kv.rows, 16);  // the next growth worked
}

TEST(FaultGrowth, AStorageThatNeverGrowsAgainRunsWhatFitsInTurn) {
  // Every growth fails: the pool's 16 rows become the limit. The runner must not retry the
  // same growth for the same readmitted session forever; the generations run in turn.
  test::FaultEngine e({.max_sessions = 3}, /*initial_rows=*/16);
  e.storage().fail_every_growth(true);
  test::CacheRecorder recorder;
  recorder.install(e.runner, e.executor.cache());
  test::Results res;
  const auto reqs = three_small();
  // A stuck runner would never go idle: stop here instead.
  ASSERT_TRUE(test::expect_solo_runs(e.runner, reqs, res, std::chrono::seconds(20))) << "the runner is stuck";
  e.runner.wait_idle();
  const EngineMetrics m = e.runner.metrics();
  EXPECT_GE(recorder.expect_failed_attempts_changed_nothing(), 1);
  // A refused growth is retried only after a generation ended and gave cells back.
  EXPECT_LE(m.failed_steps, static_cast<int64_t>(reqs.size()));
  EXPECT_EQ(m.kv.rows, 16);
  EXPECT_EQ(m.kv.live_cells, 0);
}

TEST(FaultGrowth, AGenerationTooLargeForAPoolThatCannotGrowFailsAlone) {
  test::FaultEngine e({.max_sessions = 2}, /*initial_rows=*/16);
  e.storage().fail_every_growth(true);
  test::Results res;
  const GenerationRequest big = fault_request(4, 12, 10);  // 22 cells > 16 rows
  const GenerationRequest small = fault_request(5, 5, 4);
  const GenerationId id_big = e.runner.submit(big, res.callbacks());
  const GenerationResult r = res.wait(id_big);
  EXPECT_EQ(r.finish_reason, FinishReason::Failed);
  EXPECT_NE(r.error.find("injected"), std::string::npos) << r.error;
  // The engine goes on: the next generation fits and runs.
  const GenerationResult next = res.wait(e.runner.submit(small, res.callbacks()));
  EXPECT_EQ(next.finish_reason, FinishReason::Length) << next.error;
  EXPECT_EQ(next.tokens, test::solo_tokens(small));
  e.runner.wait_idle();
  EXPECT_EQ(e.runner.metrics().kv.live_cells, 0);
}

}  // namespace
}  // namespace cellm::batching
