// The AVX2 activation quantizer (compiled with -mavx2 -mfma -mf16c). Maxima are exact in any
// order and every product and rounding is the one the portable code performs, so the bytes
// equal the portable quantizer's (tests/backend/cpu/test_matmul_activations.cpp).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant_activations.h"
#include "backend/cpu/quant_activations_scales.h"

namespace cellm::cpu::detail {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

__m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// Rounds 32 scaled values to codes and stores them in order; returns the 8 partial code sums.
__m256i store_codes(const float* x, __m256 scale, int8_t* q) {
  __m256i i[4];
  for (int k = 0; k < 4; ++k)
    i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), scale), kRound));
  const __m256i sums = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
  const __m256i packed16a = _mm256_packs_epi32(i[0], i[1]);
  const __m256i packed16b = _mm256_packs_epi32(i[2], i[3]);
  const __m256i packed8 = _mm256_packs_epi16(packed16a, packed16b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(packed8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return sums;
}

int32_t horizontal_sum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

void quantize_q8_blocks(const float* x, int64_t cols, const QuantizedRow& out, bool with_sums) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 amax = abs_ps(_mm256_loadu_ps(xb));
    for (int k = 1; k < 4; ++k) amax = _mm256_max_ps(amax, abs_ps(_mm256_loadu_ps(xb + 8 * k)));
    const Q8BlockScale scale = q8_block_scale(horizontal_max(amax));
    const __m256i sums = store_codes(xb, _mm256_set1_ps(scale.inverse), out.qs + 32 * b);
    out.d[b] = scale.d;
    if (with_sums) out.s[b] = q8_1_block_sum(scale.d_exact, horizontal_sum(sums));
  }
}

void quantize_q8_k_blocks(const float* x, int64_t cols, const QuantizedRow& out) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    int8_t* q = out.qs + 256 * b;
    int16_t* bsums = out.bsums + 16 * b;
    __m256 vmax = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) vmax = _mm256_max_ps(vmax, abs_ps(_mm256_loadu_ps(xb + 8 * k)));
    const float amax = horizontal_max(vmax);
    if (amax == 0.0f) {
      out.d[b] = 0.0f;
      std::memset(q, 0, 256);
      std::memset(bsums, 0, 16 * sizeof(int16_t));
      continue;
    }
    int first = 0;  // the first element of largest magnitude gives the sign, as in llama.cpp
    while (!(xb[first] == amax || xb[first] == -amax)) ++first;
    const Q8KBlockScale scale = q8_k_block_scale(xb[first]);
    const __m256 vscale = _mm256_set1_ps(scale.inverse);
    const __m256 top = _mm256_set1_ps(127.0f);
    for (int k = 0; k < 32; ++k) {
      const __m256 v = _mm256_min_ps(_mm256_round_ps(_mm256_mul_ps(vscale, _mm256_loadu_ps(xb + 8 * k)), kRound), top);
      const __m256i i = _mm256_cvtps_epi32(v);
      const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 8 * k), _mm_packs_epi16(i16, i16));
    }
    for (int g = 0; g < 16; ++g) {
      const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * g));
      const __m128i sums16 = _mm_madd_epi16(_mm_maddubs_epi16(_mm_set1_epi8(1), codes), _mm_set1_epi16(1));
      __m128i s = _mm_add_epi32(sums16, _mm_shuffle_epi32(sums16, _MM_SHUFFLE(1, 0, 3, 2)));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
      bsums[g] = static_cast<int16_t>(_mm_cvtsi128_si32(s));
    }
    out.d[b] = scale.d;
  }
}

}  // namespace

void quantize_activation_row_avx2(ActivationFormat format, const float* x, int64_t cols, const QuantizedRow& out) {
  if (format == ActivationFormat::Q8_K) return quantize_q8_k_blocks(x, cols, out);
  quantize_q8_blocks(x, cols, out, format == ActivationFormat::Q8_1);
}

}  // namespace cellm::cpu::detail
