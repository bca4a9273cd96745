#include "batching/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "core/exp_glibc.h"

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
  for (int32_t i = 0; i < n; ++i) {
    // NaN cannot be ranked (sorting it is undefined) nor drawn: the forward went wrong.
    if (std::isnan(logits[i])) fail(ErrorCode::Internal, "the logit of token ", i, " is NaN: the forward produced no valid distribution");
    candidates_[i] = {i, logits[i]};
  }
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
  filter_tokens(candidates_, params_.top_k, params_.top_p, params_.min_p);
  return draw();
}

int32_t Sampler::draw() {
  float max = candidates_.front().logit;
  for (const TokenLogit& c : candidates_) max = std::max(max, c.logit);
  weights_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) weights_[i] = (candidates_[i].logit - max) / params_.temperature;
  exp_in_place(weights_.data(), weights_.size());  // std::exp's bits, several at a time
  double total = 0;
  for (const float w : weights_) total += w;
  // u in [0, 1) from the generator's 53 high bits; the first candidate whose running weight
  // passes u * total is drawn (one with zero weight never is).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double cumulative = 0;
  size_t last = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (weights_[i] == 0.0f) continue;
    cumulative += weights_[i];
    last = i;
    if (target < cumulative) return candidates_[i].id;
  }
  return candidates_[last].id;  // rounding left u * total at the very end of the sum
}

}  // namespace cellm::batching
