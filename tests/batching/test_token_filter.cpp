// The cuts of the sampling chain found without sorting the vocabulary keep exactly the tokens,
// in exactly the order, that ranking the whole vocabulary and cutting it keeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "batching/token_filter.h"

namespace cellm::batching {
namespace {

// The definition: rank everything, keep the top k, then the shortest prefix holding top_p of
// the temperature-1 softmax, then the prefix at or above min_p times the best probability.
std::vector<TokenLogit> reference(std::vector<TokenLogit> tokens, int32_t top_k, float top_p, float min_p) {
  std::sort(tokens.begin(), tokens.end(), ranks_before);
  if (top_k > 0 && static_cast<size_t>(top_k) < tokens.size()) tokens.resize(static_cast<size_t>(top_k));
  const float max = tokens.front().logit;
  double sum = 0;
  for (const TokenLogit& t : tokens) sum += std::exp(t.logit - max);
  std::vector<float> p;
  for (const TokenLogit& t : tokens) p.push_back(static_cast<float>(std::exp(t.logit - max) / sum));
  size_t cut = tokens.size();
  if (top_p < 1.0f) {
    double cumulative = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      cumulative += p[i];
      if (cumulative >= top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (min_p > 0.0f) {
    size_t keep = 1;
    while (keep < cut && p[keep] >= p[0] * min_p) ++keep;
    cut = keep;
  }
  tokens.resize(cut);
  return tokens;
}

std::vector<TokenLogit> random_logits(size_t n, float spread, bool ties, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<TokenLogit> tokens(n);
  for (size_t i = 0; i < n; ++i) {
    float l = normal(rng);
    if (ties) l = std::round(l * 2.0f) / 2.0f;  // many equal logits: ranking falls back on ids
    tokens[i] = {static_cast<int32_t>(i), l};
  }
  std::shuffle(tokens.begin(), tokens.end(), rng);  // any input order
  return tokens;
}

std::vector<int32_t> ids(const std::vector<TokenLogit>& tokens) {
  std::vector<int32_t> out;
  for (const TokenLogit& t : tokens) out.push_back(t.id);
  return out;
}

TEST(TokenFilter, KeepsWhatRankingTheWholeVocabularyKeepsInTheSameOrder) {
  int cases = 0;
  uint32_t seed = 1;
  for (size_t n : {6u, 1000u, 50000u}) {
    for (float spread : {0.5f, 3.0f, 12.0f}) {
      for (bool ties : {false, true}) {
        const auto tokens = random_logits(n, spread, ties, seed++);
        for (int32_t top_k : {0, 1, 40, static_cast<int32_t>(n) + 5}) {
          for (float top_p : {1.0f, 0.999f, 0.9f, 0.5f}) {
            for (float min_p : {0.0f, 0.05f, 0.5f}) {
              if (top_p == 1.0f && min_p == 0.0f && (top_k == 0 || top_k > static_cast<int32_t>(n))) continue;
              auto got = tokens;
              filter_tokens(got, top_k, top_p, min_p);
              ASSERT_EQ(ids(got), ids(reference(tokens, top_k, top_p, min_p)))
                  << "n " << n << " spread " << spread << " ties " << ties << " top_k " << top_k << " top_p "
                  << top_p << " min_p " << min_p;
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 200);
  // Gemma 3's vocabulary size, the case the partitioning is for.
  const auto gemma = random_logits(262144, 3.0f, false, 99);
  for (float top_p : {0.95f, 0.5f}) {
    auto got = gemma;
    filter_tokens(got, 0, top_p, 0.05f);
    ASSERT_EQ(ids(got), ids(reference(gemma, 0, top_p, 0.05f))) << "top_p " << top_p;
  }
}

TEST(TokenFilter, WithNoCutEveryTokenStaysInTheOrderGiven) {
  const auto tokens = random_logits(5000, 3.0f, false, 9);
  for (int32_t top_k : {0, 5000, 9999}) {
    auto got = tokens;
    filter_tokens(got, top_k, 1.0f, 0.0f);
    EXPECT_EQ(ids(got), ids(tokens)) << "top_k " << top_k;
  }
}

TEST(TokenFilter, AFlatDistributionNeedsTheWholeRanking) {
  // Equal logits: top-p 0.999 keeps all but the last few tokens, by id.
  std::vector<TokenLogit> tokens;
  for (int32_t i = 9999; i >= 0; --i) tokens.push_back({i, 0.25f});
  auto got = tokens;
  filter_tokens(got, 0, 0.999f, 0.0f);
  EXPECT_EQ(ids(got), ids(reference(tokens, 0, 0.999f, 0.0f)));
  EXPECT_GE(got.size(), 9980u);
  EXPECT_EQ(got.front().id, 0);
}

}  // namespace
}  // namespace cellm::batching
