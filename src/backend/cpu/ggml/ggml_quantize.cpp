#include "backend/cpu/ggml/ggml_quantize.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"

namespace cellm::cpu::ggml {
namespace {

using gguf::kBlockElements;
using gguf::kSuperBlockElements;

// The AVX2 block quantizer of Q8_0 and Q8_1: d = max|x| / 127, codes round(x * 127 / max|x|).
// Returns d before its rounding to fp16 and the sum of the codes (Q8_1 keeps d * sum).
struct BlockScale {
  float d;
  int32_t sum;
};

template <typename Block>
BlockScale quantize_block(const float* x, Block& y) {
  float amax = 0;
  for (int i = 0; i < kBlockElements; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.f;
  y.d = fp32_to_fp16(d);
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  int32_t sum = 0;
  for (int i = 0; i < kBlockElements; ++i) {
    // _mm256_round_ps (ties to even, the default rounding mode), _mm256_cvtps_epi32, then the
    // saturating packs; the sum is of the 32-bit codes before the packs, as hsum_i32_8 takes them.
    const float code = std::nearbyint(x[i] * id);
    sum += static_cast<int32_t>(code);
    y.qs[i] = static_cast<int8_t>(std::clamp(code, -128.0f, 127.0f));
  }
  return {d, sum};
}

// ggml's nearest_int: round to nearest, ties to even, through the 1.5 * 2^23 trick.
int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  return static_cast<int>(float_to_bits(shifted) & 0x007fffff) - 0x00400000;
}

}  // namespace

void quantize_q8_0(const float* x, gguf::BlockQ8_0* y, int64_t k) {
  for (int64_t b = 0; b < k / kBlockElements; ++b) quantize_block(x + b * kBlockElements, y[b]);
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t k) {
  for (int64_t b = 0; b < k / kBlockElements; ++b) {
    const BlockScale scale = quantize_block(x + b * kBlockElements, y[b]);
    y[b].s = fp32_to_fp16(scale.d * static_cast<float>(scale.sum));
  }
}

void quantize_q8_K(const float* x, gguf::BlockQ8_K* y, int64_t k, bool positive_max_wins) {
  for (int64_t b = 0; b < k / kSuperBlockElements; ++b, x += kSuperBlockElements) {
    gguf::BlockQ8_K& out = y[b];
    float amax = 0, max = 0;
    bool positive_at_max = false;
    for (int j = 0; j < kSuperBlockElements; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) amax = ax, max = x[j];
    }
    for (int j = 0; j < kSuperBlockElements; ++j) positive_at_max |= amax != 0 && x[j] == amax;
    if (amax == 0) {
      out.d = 0;
      std::fill(std::begin(out.qs), std::end(out.qs), int8_t{0});
      std::fill(std::begin(out.bsums), std::end(out.bsums), int16_t{0});
      continue;
    }
    const float iscale = positive_max_wins ? (positive_at_max ? -127.f / amax : 127.f / amax) : -127.f / max;
    for (int j = 0; j < kSuperBlockElements; ++j) out.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < kSuperBlockElements / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.qs[16 * g + i];
      out.bsums[g] = static_cast<int16_t>(sum);
    }
    out.d = 1 / iscale;
  }
}

}  // namespace cellm::cpu::ggml
