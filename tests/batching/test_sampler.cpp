#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "batching/sampler.h"
#include "core/error.h"

namespace cellm::batching {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};

TEST(Sampler, GreedyTakesTheLowestIdAmongEqualMaxima) {
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.sample(kLogits, {}), 1);
  EXPECT_EQ(argmax(kLogits), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(kLogits, {}));
    tb.push_back(b.sample(kLogits, {}));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i) tc.push_back(c.sample(kLogits, {}));
  EXPECT_NE(ta, tc);
}

std::map<int32_t, int> histogram(SamplingParams p, int n = 4000) {
  p.seed = 7;
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(kLogits, {})];
  return h;
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  const auto h = histogram(p);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(4));  // the two logits of 3.0
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;  // 1 and 4 hold ~0.61 of the mass together; 1 alone ~0.31
  auto h = histogram(p);
  EXPECT_EQ(h.size(), 2u);
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p(best): logits >= 3 - ln 2 -> ids 1, 4, 2
  h = histogram(p);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_TRUE(h.count(2));
}

TEST(Sampler, DrawsFollowTheSoftmaxAtTheTemperature) {
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    for (float top_p : {1.0f, 0.99f}) {  // no cut (tokens in id order), and a ranked list
      p.top_p = top_p;
      const int draws = 40000;
      const auto h = histogram(p, draws);
      double sum = 0;
      for (float l : kLogits) sum += std::exp(l / temperature);
      // The draw is over the tokens the cut kept (every one without a cut), renormalised.
      double kept = 0;
      for (size_t i = 0; i < kLogits.size(); ++i)
        if (top_p == 1.0f || h.count(static_cast<int32_t>(i))) kept += std::exp(kLogits[i] / temperature) / sum;
      EXPECT_GT(kept, 0.9);
      for (size_t i = 0; i < kLogits.size(); ++i) {
        if (top_p < 1.0f && !h.count(static_cast<int32_t>(i))) continue;  // cut away
        const double want = std::exp(kLogits[i] / temperature) / sum / kept;
        const double got = h.count(static_cast<int32_t>(i)) ? h.at(static_cast<int32_t>(i)) / double(draws) : 0.0;
        EXPECT_NEAR(got, want, 0.01) << "token " << i << " at temperature " << temperature << ", top_p " << top_p;
      }
    }
  }
}

TEST(Sampler, LowTemperatureApproachesGreedy) {
  SamplingParams p;
  p.temperature = 0.01f;
  const auto h = histogram(p);
  EXPECT_EQ(h.size(), 2u);  // the two tied maxima only
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams p;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  const std::vector<int32_t> history = {1, 4};
  EXPECT_EQ(s.sample(kLogits, history), 2);  // 3.0 / 2 = 1.5 < 2.5
}

TEST(Sampler, ANaNLogitFailsTheDrawWithAMessage) {
  std::vector<float> logits = kLogits;
  logits[3] = std::nanf("");
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  Sampler s(p);
  try {
    s.sample(logits, {});
    FAIL() << "drew from a row holding NaN";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 3 is NaN"), std::string::npos) << e.what();
  }
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1.0f;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.min_p = 2.0f;
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace cellm::batching
