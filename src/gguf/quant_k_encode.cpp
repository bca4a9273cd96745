#include "gguf/quant_k_encode.h"

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "gguf/quant_k_scales.h"
#include "gguf/quant_math.h"

// Each sub-block gets the scale (and min) that minimises its squared error, found by trying
// inverse scales around the one that spans the sub-block's range and refitting each
// candidate's levels by least squares. The sub-block scales are then themselves quantized
// against the super-block scale, and the elements are rounded once more against the scales
// actually stored, so what dequantizes is what was optimised for.

namespace cellm::gguf {
namespace {

using quant_math::round_to_level;

constexpr int kSearchSteps = 10;       // candidates on each side of the range-spanning scale
constexpr float kSearchStride = 0.1f;  // in units of one quantization level

// x ~ scale * q with integer q in [lo, hi].
double symmetric_error(const float* x, int n, int lo, int hi, float scale) {
  const float inverse = quant_math::inverse_or_zero(scale);
  double error = 0;
  for (int i = 0; i < n; ++i) {
    const double e = static_cast<double>(scale) * round_to_level(x[i] * inverse, lo, hi) - x[i];
    error += e * e;
  }
  return error;
}

// Best scale for x ~ scale * q; lo < 0 is the level the largest magnitude maps to.
float fit_symmetric(const float* x, int n, int lo, int hi) {
  const float extreme = quant_math::signed_absmax(x, n);
  if (extreme == 0.0f) return 0.0f;
  float best_scale = extreme / static_cast<float>(lo);
  double best_error = symmetric_error(x, n, lo, hi, best_scale);
  for (int t = -kSearchSteps; t <= kSearchSteps; ++t) {
    const float inverse = (static_cast<float>(lo) + kSearchStride * static_cast<float>(t)) / extreme;
    double sum_xq = 0, sum_qq = 0;
    for (int i = 0; i < n; ++i) {
      const double q = round_to_level(x[i] * inverse, lo, hi);
      sum_xq += x[i] * q;
      sum_qq += q * q;
    }
    if (sum_qq == 0) continue;
    const auto scale = static_cast<float>(sum_xq / sum_qq);
    const double error = symmetric_error(x, n, lo, hi, scale);
    if (error < best_error) {
      best_error = error;
      best_scale = scale;
    }
  }
  return best_scale;
}

struct ScaleMin {
  float scale;  // >= 0
  float min;    // >= 0, subtracted: x ~ scale * q - min
};

double asymmetric_error(const float* x, int n, int top, ScaleMin fit) {
  const float inverse = quant_math::inverse_or_zero(fit.scale);
  double error = 0;
  for (int i = 0; i < n; ++i) {
    const int q = round_to_level((x[i] + fit.min) * inverse, 0, top);
    const double e = static_cast<double>(fit.scale) * q - fit.min - x[i];
    error += e * e;
  }
  return error;
}

// Best (scale, min) for x ~ scale * q - min with q in [0, top]. The min is never negative
// because the format stores it unsigned, so the range always includes zero.
ScaleMin fit_asymmetric(const float* x, int n, int top) {
  float lo = 0.0f;
  float hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::fmin(lo, x[i]);
    hi = std::fmax(hi, x[i]);
  }
  if (!(hi > lo)) return {0.0f, -lo};
  ScaleMin best{(hi - lo) / static_cast<float>(top), -lo};
  double best_error = asymmetric_error(x, n, top, best);
  for (int t = -kSearchSteps; t <= kSearchSteps; ++t) {
    const float inverse = (static_cast<float>(top) + kSearchStride * static_cast<float>(t)) / (hi - lo);
    double sum_q = 0, sum_qq = 0, sum_x = 0, sum_xq = 0;
    for (int i = 0; i < n; ++i) {
      const double q = round_to_level((x[i] - lo) * inverse, 0, top);
      sum_q += q;
      sum_qq += q * q;
      sum_x += x[i];
      sum_xq += x[i] * q;
    }
    const double det = n * sum_qq - sum_q * sum_q;
    if (det <= 0) continue;
    double scale = (n * sum_xq - sum_q * sum_x) / det;
    double offset = (sum_x - scale * sum_q) / n;
    if (offset > 0) {  // would need a negative min: pin the min at zero and refit the scale
      offset = 0;
      scale = sum_xq / sum_qq;
    }
    if (!(scale > 0)) continue;
    const ScaleMin candidate{static_cast<float>(scale), static_cast<float>(-offset)};
    const double error = asymmetric_error(x, n, top, candidate);
    if (error < best_error) {
      best_error = error;
      best = candidate;
    }
  }
  return best;
}

// Shared by Q4_K (top 15) and Q5_K (top 31): fills the two fp16 super-scales, the packed
// 6-bit sub-block scales and mins, and the 256 levels.
void encode_k_asymmetric(const float* x, int top, uint16_t& d_bits, uint16_t& dmin_bits, uint8_t* packed_scales,
                         uint8_t* levels) {
  constexpr int kSubBlocks = 8;
  constexpr int kSubBlockElements = kSuperBlockElements / kSubBlocks;
  ScaleMin fits[kSubBlocks];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int s = 0; s < kSubBlocks; ++s) {
    fits[s] = fit_asymmetric(x + kSubBlockElements * s, kSubBlockElements, top);
    max_scale = std::fmax(max_scale, fits[s].scale);
    max_min = std::fmax(max_min, fits[s].min);
  }
  d_bits = fp32_to_fp16(max_scale / 63.0f);
  dmin_bits = fp32_to_fp16(max_min / 63.0f);
  const float d = fp16_to_fp32(d_bits);
  const float dmin = fp16_to_fp32(dmin_bits);
  uint8_t scales[kSubBlocks];
  uint8_t mins[kSubBlocks];
  for (int s = 0; s < kSubBlocks; ++s) {
    scales[s] = static_cast<uint8_t>(round_to_level(fits[s].scale * quant_math::inverse_or_zero(d), 0, 63));
    mins[s] = static_cast<uint8_t>(round_to_level(fits[s].min * quant_math::inverse_or_zero(dmin), 0, 63));
    // The same float products dequantization forms.
    const float scale = d * static_cast<float>(scales[s]);
    const float min = dmin * static_cast<float>(mins[s]);
    const float inverse = quant_math::inverse_or_zero(scale);
    for (int l = 0; l < kSubBlockElements; ++l) {
      const int i = kSubBlockElements * s + l;
      levels[i] = static_cast<uint8_t>(round_to_level((x[i] + min) * inverse, 0, top));
    }
  }
  pack_k_scale_min(scales, mins, packed_scales);
}

// Low nibbles of a Q4_K/Q5_K level array into qs: sub-blocks 2c and 2c+1 share byte chunk c.
void pack_k_nibbles(const uint8_t* levels, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<uint8_t>((levels[64 * c + l] & 0x0f) | ((levels[64 * c + 32 + l] & 0x0f) << 4));
}

}  // namespace

void encode_block(const float* x, BlockQ4_K& block) {
  uint8_t levels[kSuperBlockElements];
  encode_k_asymmetric(x, 15, block.d, block.dmin, block.scales, levels);
  pack_k_nibbles(levels, block.qs);
}

void encode_block(const float* x, BlockQ5_K& block) {
  uint8_t levels[kSuperBlockElements];
  encode_k_asymmetric(x, 31, block.d, block.dmin, block.scales, levels);
  pack_k_nibbles(levels, block.qs);
  std::memset(block.qh, 0, sizeof block.qh);
  for (int i = 0; i < kSuperBlockElements; ++i)
    block.qh[i % 32] |= static_cast<uint8_t>((levels[i] >> 4) << (i / 32));
}

void encode_block(const float* x, BlockQ6_K& block) {
  constexpr int kGroups = kSuperBlockElements / 16;
  float fits[kGroups];
  float max_abs = 0.0f;
  for (int g = 0; g < kGroups; ++g) {
    fits[g] = fit_symmetric(x + 16 * g, 16, -32, 31);
    max_abs = std::fmax(max_abs, std::fabs(fits[g]));
  }
  block.d = fp32_to_fp16(max_abs / 127.0f);
  const float d = fp16_to_fp32(block.d);
  std::memset(block.ql, 0, sizeof block.ql);
  std::memset(block.qh, 0, sizeof block.qh);
  for (int g = 0; g < kGroups; ++g) {
    block.scales[g] = static_cast<int8_t>(round_to_level(fits[g] * quant_math::inverse_or_zero(d), -127, 127));
    const float inverse = quant_math::inverse_or_zero(d * static_cast<float>(block.scales[g]));
    for (int l = 0; l < 16; ++l) {
      const int i = 16 * g + l;
      const int level = round_to_level(x[i] * inverse, -32, 31) + 32;
      // Element i sits in half h at position 32k + p (see quant_blocks.h).
      const int h = i / 128, k = (i % 128) / 32, p = i % 32;
      block.ql[64 * h + p + 32 * (k & 1)] |= static_cast<uint8_t>((level & 0x0f) << (4 * (k / 2)));
      block.qh[32 * h + p] |= static_cast<uint8_t>((level >> 4) << (2 * k));
    }
  }
}

void encode_block(const float* x, BlockQ8_K& block) {
  float amax = 0.0f;
  for (int i = 0; i < kSuperBlockElements; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float inverse = amax == 0.0f ? 0.0f : 127.0f / amax;
  block.d = quant_math::inverse_or_zero(inverse);
  for (int i = 0; i < kSuperBlockElements; ++i)
    block.qs[i] = static_cast<int8_t>(round_to_level(x[i] * inverse, -127, 127));
  for (int g = 0; g < kSuperBlockElements / 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += block.qs[16 * g + l];
    block.bsums[g] = static_cast<int16_t>(sum);
  }
}

}  // namespace cellm::gguf
