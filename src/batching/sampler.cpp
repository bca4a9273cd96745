#include "batching/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace cellm::batching {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail(ErrorCode::InvalidArgument, "temperature must be >= 0, got ", temperature);
  if (top_k < 0) fail(ErrorCode::InvalidArgument, "top_k must be >= 0, got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail(ErrorCode::InvalidArgument, "top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail(ErrorCode::InvalidArgument, "min_p must be in [0, 1], got ", min_p);
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    fail(ErrorCode::InvalidArgument, "repeat_penalty must be > 0, got ", repeat_penalty);
  if (repeat_last_n < 0) fail(ErrorCode::InvalidArgument, "repeat_last_n must be >= 0, got ", repeat_last_n);
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()),
      rng_(seed_) {
  params_.validate();
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const auto n = static_cast<int32_t>(logits.size());
  if (n == 0) fail(ErrorCode::Internal, "sampling from an empty logits row");
  const bool penalise = params_.repeat_penalty != 1.0f && params_.repeat_last_n > 0 && !history.empty();
  if (params_.greedy() && !penalise) return argmax(logits);

  candidates_.resize(n);
  for (int32_t i = 0; i < n; ++i) candidates_[i] = {i, logits[i]};
  if (penalise) {
    // As llama.cpp: a seen token's positive logit is divided by the penalty, a negative one multiplied.
    const size_t from = history.size() > static_cast<size_t>(params_.repeat_last_n)
                            ? history.size() - static_cast<size_t>(params_.repeat_last_n) : 0;
    std::unordered_set<int32_t> seen(history.begin() + static_cast<std::ptrdiff_t>(from), history.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n) continue;
      float& l = candidates_[id].logit;
      l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
  }
  if (params_.greedy()) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i)
      if (candidates_[i].logit > candidates_[best].logit) best = i;
    return best;
  }
  // Sort by logit (ties by id, so the order is deterministic); only the top k need sorting.
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep), candidates_.end(),
                      by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  auto softmax = [&](float temperature) {
    probs_.resize(candidates_.size());
    const float max = candidates_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      probs_[i] = std::exp((candidates_[i].logit - max) / temperature);
      sum += probs_[i];
    }
    for (float& p : probs_) p = static_cast<float>(p / sum);
  };
  softmax(1.0f);
  if (params_.top_p < 1.0f) {
    double cumulative = 0;
    size_t cut = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += probs_[i];
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    candidates_.resize(cut);
    probs_.resize(cut);
  }
  if (params_.min_p > 0.0f) {
    const float floor = probs_[0] * params_.min_p;
    size_t cut = 1;
    while (cut < probs_.size() && probs_[cut] >= floor) ++cut;
    candidates_.resize(cut);
  }
  softmax(params_.temperature);
  std::discrete_distribution<size_t> pick(probs_.begin(), probs_.end());
  return candidates_[pick(rng_)].id;
}

}  // namespace cellm::batching
