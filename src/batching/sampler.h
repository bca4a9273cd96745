#pragma once
// Picks the next token from a row of logits. The chain, in order: repetition penalty over the
// recent history, top-k, top-p (nucleus), min-p (all three on the softmax of the penalised
// logits), temperature, then a draw from a seeded generator. Temperature 0 is greedy (argmax,
// lowest id on ties) and draws nothing. The same seed and the same logits give the same tokens
// (the draw maps the generator's 53 high bits onto the cumulative weights itself, so that
// holds across standard libraries too). The cuts never sort the whole vocabulary
// (token_filter.h).
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "batching/token_filter.h"

namespace cellm::batching {

struct SamplingParams {
  float temperature = 0.0f;     // 0: greedy
  int32_t top_k = 0;            // 0: off
  float top_p = 1.0f;           // 1: off
  float min_p = 0.0f;           // 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last repeat_last_n
  int32_t repeat_last_n = 64;
  std::optional<uint64_t> seed;  // none: drawn from std::random_device

  // Throws InvalidArgument naming the parameter when a value is out of range.
  void validate() const;
  bool greedy() const { return temperature <= 0.0f; }
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `history`: the tokens so far (prompt and output), for the repetition penalty.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  uint64_t seed() const { return seed_; }
  // Greedy without a repetition penalty: the token is the argmax of the logits alone.
  bool is_plain_greedy() const { return params_.greedy() && params_.repeat_penalty == 1.0f; }

 private:
  // A draw from the softmax of the candidates' logits at the temperature.
  int32_t draw();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<TokenLogit> candidates_;
  std::vector<float> weights_;
};

// Index of the largest value; the lowest index among equals.
int32_t argmax(std::span<const float> logits);

}  // namespace cellm::batching
