// Sampled rows of one step are drawn side by side: on the backend's host threads, or, when the
// backend lends none (a device backend), on threads of the runner's own. Either way each
// generation draws from its own generator, so it gets the tokens of its solo run.
#include <gtest/gtest.h>

#include "batching/fault_engine.h"

namespace cellm::batching {
namespace {

class SamplingThreads : public ::testing::TestWithParam<bool> {};

TEST_P(SamplingThreads, SampledGenerationsDrawnTogetherEqualTheirSoloRuns) {
  test::FaultEngine e({.max_sessions = 8, .max_step_tokens = 32});
  e.backend.lend_host_threads = GetParam();  // read at the first step that draws several rows
  test::Results res;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = test::fault_request(i, 4 + i, 16);
    r.sampling.temperature = 0.8f + 0.1f * static_cast<float>(i);
    r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
    r.sampling.seed = 200 + i;
    reqs.push_back(r);
  }
  ASSERT_TRUE(test::expect_solo_runs(e.runner, reqs, res));
  e.runner.wait_idle();
  EXPECT_GE(e.runner.metrics().max_sequences_in_step, 2);  // rows were drawn together
}

INSTANTIATE_TEST_SUITE_P(Lent, SamplingThreads, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "BackendThreads" : "RunnersOwnThreads"; });

}  // namespace
}  // namespace cellm::batching
