// Picking a token failing for one generation (the runner's sample hook, where the sampler
// runs): that generation fails and its cells are freed; the others in the same forward get
// their tokens as if nothing happened, and the engine thread lives on.
#include <gtest/gtest.h>

#include "batching/cache_recorder.h"
#include "batching/fault_engine.h"
#include "core/error.h"

namespace cellm::batching {
namespace {

using test::fault_request;

// sampled: one generation samples (temperature > 0, seeded), so the forward returns logits
// and the sampler runs; otherwise all are greedy and the tokens come from the device argmax.
class FaultSampler : public ::testing::TestWithParam<bool> {};

TEST_P(FaultSampler, FailsOnlyItsGenerationAndFreesItsCells) {
  test::FaultEngine e({.max_sessions = 3});
  std::vector<GenerationRequest> reqs = {fault_request(1, 6, 8), fault_request(2, 9, 8), fault_request(3, 5, 8)};
  if (GetParam()) {
    reqs[2].sampling.temperature = 0.8f;
    reqs[2].sampling.seed = 11;
  }
  // Ids are handed out in submission order from 1; the victim is the second generation.
  constexpr GenerationId kVictim = 2;
  constexpr int kFailingPick = 3;  // its third token
  int picks = 0;
  e.runner.set_sample_hook([&picks](GenerationId id) {
    if (id == kVictim && ++picks == kFailingPick) throw Error(ErrorCode::Internal, "injected sampler failure");
  });
  test::CacheRecorder recorder;
  recorder.install(e.runner, e.executor.cache());
  test::Results res;
  std::vector<GenerationId> ids;
  for (const auto& r : reqs) ids.push_back(e.runner.submit(r, res.callbacks()));
  ASSERT_EQ(ids[1], kVictim);
  const GenerationResult victim = res.wait(ids[1]);
  EXPECT_EQ(victim.finish_reason, FinishReason::Failed);
  EXPECT_NE(victim.error.find("injected sampler failure"), std::string::npos) << victim.error;
  EXPECT_EQ(victim.tokens.size(), static_cast<size_t>(kFailingPick - 1));
  const std::vector<int32_t> victim_alone = test::solo_tokens(reqs[1]);
  EXPECT_EQ(victim.tokens, std::vector<int32_t>(victim_alone.begin(), victim_alone.begin() + kFailingPick - 1));
  for (size_t i : {size_t{0}, size_t{2}}) {
    const GenerationResult r = res.wait(ids[i]);
    EXPECT_EQ(r.finish_reason, FinishReason::Length) << r.error;
    EXPECT_EQ(r.tokens, test::solo_tokens(reqs[i])) << "generation " << i;
  }
  e.runner.wait_idle();
  const EngineMetrics m = e.runner.metrics();
  EXPECT_EQ(m.failed_steps, 0);  // the forward itself worked
  EXPECT_EQ(recorder.expect_failed_attempts_changed_nothing(), 0);
  EXPECT_EQ(m.kv.live_cells, 0);
  EXPECT_EQ(m.kv.sequences, 0);
  // The engine still serves.
  const GenerationResult after = res.wait(e.runner.submit(reqs[1], res.callbacks()));
  EXPECT_EQ(after.tokens, victim_alone);
}

INSTANTIATE_TEST_SUITE_P(Paths, FaultSampler, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "SampledLogits" : "DeviceArgmax"; });

}  // namespace
}  // namespace cellm::batching
