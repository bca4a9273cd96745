#pragma once
// Small numeric helpers shared by the quantizers (not part of the public API).
#include <algorithm>
#include <cmath>

namespace cellm::gguf::quant_math {

// The element of largest magnitude, keeping its sign; the first one on ties (numpy argmax).
inline float signed_absmax(const float* x, int n) {
  int best = 0;
  for (int j = 1; j < n; ++j)
    if (std::fabs(x[j]) > std::fabs(x[best])) best = j;
  return x[best];
}

inline float inverse_or_zero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// Rounds half away from zero and clamps to [lo, hi]; NaN gives the level nearest zero, so
// no float-to-int conversion is ever out of range.
inline int round_to_level(float v, int lo, int hi) {
  if (std::isnan(v)) return std::clamp(0, lo, hi);
  return static_cast<int>(std::clamp(std::round(v), static_cast<float>(lo), static_cast<float>(hi)));
}

}  // namespace cellm::gguf::quant_math
