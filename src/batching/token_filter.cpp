#include "batching/token_filter.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/exp_glibc.h"

namespace cellm::batching {
namespace {

// Buckets of logit distance below the best token, 1/16 of a logit wide; the last one holds
// everything further down (and NaN).
constexpr int kBuckets = 1024;
constexpr float kBucketsPerLogit = 16.0f;

int bucket_of(float logit, float max) {
  const float d = (max - logit) * kBucketsPerLogit;
  return d < static_cast<float>(kBuckets - 1) ? static_cast<int>(d) : kBuckets - 1;
}

// Ranks tokens[0, want) best first, given that tokens[0, ranked) already are and nothing
// after `ranked` ranks before them. Returns the new ranked count (want, or all there are).
size_t rank_more(std::vector<TokenLogit>& tokens, size_t ranked, size_t want) {
  want = std::min(want, tokens.size());
  if (want <= ranked) return ranked;
  auto first = tokens.begin() + static_cast<std::ptrdiff_t>(ranked);
  auto middle = tokens.begin() + static_cast<std::ptrdiff_t>(want);
  // A few more (top-k 40, a first round): a heap of them, which rejects most of the rest with
  // one comparison. Many more: select, then sort only those.
  constexpr size_t kHeapLimit = 2048;
  if (want - ranked <= kHeapLimit) {
    std::partial_sort(first, middle, tokens.end(), ranks_before);
  } else {
    std::nth_element(first, middle - 1, tokens.end(), ranks_before);
    std::sort(first, middle, ranks_before);
  }
  return want;
}

}  // namespace

void filter_tokens(std::vector<TokenLogit>& tokens, int32_t top_k, float top_p, float min_p) {
  if (tokens.empty()) return;
  size_t ranked = 0;  // tokens[0, ranked) are the best, in order
  if (top_k > 0 && static_cast<size_t>(top_k) < tokens.size()) {
    ranked = rank_more(tokens, 0, static_cast<size_t>(top_k));
    tokens.resize(ranked);
  }
  if (top_p >= 1.0f && min_p <= 0.0f) return;

  // Softmax at temperature 1 over what top-k kept: p = exp(logit - max) / sum. The same pass
  // files each token's weight under how far below the best logit it lies.
  float max = tokens.front().logit;
  for (const TokenLogit& t : tokens) max = std::max(max, t.logit);
  thread_local std::vector<float> weight;  // exp(logit - max): std::exp's bits, several at a time
  weight.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) weight[i] = tokens[i].logit - max;
  exp_in_place(weight.data(), weight.size());
  std::array<double, kBuckets> mass{};
  double sum = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    sum += weight[i];
    mass[static_cast<size_t>(bucket_of(tokens[i].logit, max))] += weight[i];
  }
  auto prob = [&](const TokenLogit& t) { return static_cast<float>(std::exp(t.logit - max) / sum); };

  // min-p keeps the tokens whose probability is at least min_p times the best one's. The
  // probability grows with the logit, so they are the best `keep` tokens: counting is enough,
  // and only tokens within a hair of logit = max + ln(min_p) need their probability.
  size_t keep = tokens.size();
  if (min_p > 0.0f) {
    const float floor = static_cast<float>(1.0 / sum) * min_p;  // the best token has exp(0) / sum
    const float edge = std::log(min_p);
    constexpr float kHair = 1e-3f;  // far above float rounding of exp and of the division
    keep = std::max<size_t>(1, static_cast<size_t>(std::count_if(tokens.begin(), tokens.end(), [&](const TokenLogit& t) {
                              const float below = t.logit - max;
                              if (below > edge + kHair) return true;
                              if (below < edge - kHair) return false;
                              return prob(t) >= floor;
                            })));
  }
  // top-p keeps the shortest ranked prefix holding top_p of the mass. The best buckets that
  // hold it (and one more, for sums taken in another order) contain that prefix: only their
  // tokens are ranked. Should rounding still leave the sum short, ranking goes on in rounds.
  size_t cut = keep;
  if (top_p < 1.0f) {
    if (ranked < keep) {
      double held = 0;
      for (int b = 0; b < kBuckets - 1; ++b) {
        held += mass[static_cast<size_t>(b)] / sum;
        if (held < top_p) continue;
        const int last = b + 1;
        const auto end = std::partition(tokens.begin() + static_cast<std::ptrdiff_t>(ranked), tokens.end(),
                                        [&](const TokenLogit& t) { return bucket_of(t.logit, max) <= last; });
        std::sort(tokens.begin() + static_cast<std::ptrdiff_t>(ranked), end, ranks_before);
        ranked = static_cast<size_t>(end - tokens.begin());
        break;
      }
    }
    double cumulative = 0;
    bool reached = false;
    for (size_t i = 0, round = 64; i < keep && !reached; round *= 4) {
      ranked = rank_more(tokens, ranked, std::min(keep, std::max(ranked, round)));
      for (; i < std::min(ranked, keep) && !reached; ++i) {
        cumulative += prob(tokens[i]);
        if (cumulative >= top_p) {
          cut = i + 1;
          reached = true;
        }
      }
    }
  }
  rank_more(tokens, std::min(ranked, cut), cut);  // the draw sees what it keeps best first
  tokens.resize(cut);
}

}  // namespace cellm::batching
