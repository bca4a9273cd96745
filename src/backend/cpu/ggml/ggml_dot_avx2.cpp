// ggml_dot.h's products with AVX2, as ggml's own AVX2 code computes them: the integer lane
// sums by vpmaddubsw + vpmaddwd (exact: no pair of codes in [-127, 127] times a nibble or a
// 6-bit code reaches 16 bits), the lanes scaled and accumulated by vfmadd, hsum8 at the end.
// Compiled with -mavx2 -mfma -mf16c; called only where the CPU has them (ggml_matmul.cpp).
#include <immintrin.h>

#include <cmath>

#include <cstring>

#include "backend/cpu/ggml/ggml_dot.h"
#include "backend/cpu/ggml/ggml_sums.h"
#include "core/half.h"
#include "gguf/quant_k_scales.h"

namespace cellm::cpu::ggml::avx2 {
namespace {

using gguf::BlockQ8_0;
using gguf::BlockQ8_K;

inline float half(uint16_t h) { return _cvtsh_ss(h); }

// 8 lanes of sum(a[4l..4l+3] * b[4l..4l+3]) for unsigned a (< 128) and signed b.
inline __m256i lane_sums_us(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(a, b));
}
// The same for signed a, through the sign trick of ggml's mul_sum_i8_pairs_float.
inline __m256i lane_sums_ss(__m256i a, __m256i b) { return lane_sums_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)); }

// Low nibbles of 16 bytes in bytes 0..15, high nibbles in 16..31.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set1_epi8(0x0f), _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp));
}

// 0xff in byte j where bit j of the 32 bits at qh is set.
inline __m256i bytes_from_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuffle);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

inline __m256i load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The sum of the eight lanes (exact: integers).
inline int32_t horizontal_sum(__m256i lanes) {
  const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
  const __m128i two = _mm_add_epi32(four, _mm_unpackhi_epi64(four, four));
  return _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, 1)));
}

inline float finish(__m256 acc) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  return hsum8(lanes);
}

// acc += d * lanes, lane by lane, fused.
inline __m256 accumulate(__m256 acc, float d, __m256i lanes) {
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

// offset_sum of ggml_dot.h compiled here: std::fma is one instruction with -mfma, a call into
// libm in the portable file (a third of a Q4_1 product's time).
template <typename Block>
float fused_offsets(const Block* x, const BlockQ8_1* y, int64_t blocks) {
  float summs = 0;
  for (int64_t b = 0; b < blocks; ++b) summs = std::fma(half(x[b].m), half(y[b].s), summs);
  return summs;
}

}  // namespace

float dot_q4_0(const gguf::BlockQ4_0* x, const BlockQ8_0* y, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i q = _mm256_sub_epi8(nibbles(x[b].qs), _mm256_set1_epi8(8));
    acc = accumulate(acc, half(x[b].d) * half(y[b].d), lane_sums_ss(q, load(y[b].qs)));
  }
  return finish(acc);
}

float dot_q4_0_repacked(const gguf::BlockQ4_0* x, const BlockQ8_0* y, int64_t blocks) {
  float acc = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i q = _mm256_sub_epi8(nibbles(x[b].qs), _mm256_set1_epi8(8));
    acc = std::fma(static_cast<float>(horizontal_sum(lane_sums_ss(q, load(y[b].qs)))), half(x[b].d) * half(y[b].d), acc);
  }
  return acc;
}

float dot_q4_1(const gguf::BlockQ4_1* x, const BlockQ8_1* y, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b)
    acc = accumulate(acc, half(x[b].d) * half(y[b].d), lane_sums_us(nibbles(x[b].qs), load(y[b].qs)));
  return finish(acc) + fused_offsets(x, y, blocks);
}

float dot_q5_0(const gguf::BlockQ5_0* x, const BlockQ8_0* y, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    // The code minus 16: a clear fifth bit sets the byte's high nibble (-16 + nibble).
    const __m256i high = _mm256_andnot_si256(bytes_from_bits(x[b].qh), _mm256_set1_epi8(static_cast<char>(0xf0)));
    const __m256i q = _mm256_or_si256(nibbles(x[b].qs), high);
    acc = accumulate(acc, half(x[b].d) * half(y[b].d), lane_sums_ss(q, load(y[b].qs)));
  }
  return finish(acc);
}

float dot_q5_1(const gguf::BlockQ5_1* x, const BlockQ8_1* y, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i high = _mm256_and_si256(bytes_from_bits(x[b].qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(nibbles(x[b].qs), high);
    acc = accumulate(acc, half(x[b].d) * half(y[b].d), lane_sums_us(q, load(y[b].qs)));
  }
  return finish(acc) + fused_offsets(x, y, blocks);
}

float dot_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b)
    acc = accumulate(acc, half(x[b].d) * half(y[b].d), lane_sums_ss(load(x[b].qs), load(y[b].qs)));
  return finish(acc);
}

float dot_q6_K(const gguf::BlockQ6_K* x, const BlockQ8_K* y, int64_t blocks) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* q8 = y[b].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int half128 = 0; half128 < 2; ++half128) {
      const __m256i bits1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i bits2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i bits_h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      ql += 64, qh += 32;
      const __m256i codes[4] = {
          _mm256_or_si256(_mm256_and_si256(bits1, m4), _mm256_slli_epi16(_mm256_and_si256(bits_h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(bits2, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits_h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits_h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits_h, 6), m2), 4))};
      for (int k = 0; k < 4; ++k, q8 += 32) {
        const __m256i a = load(q8);
        // (code - 32) * q8 in 16-bit pairs, then times the scale of each 16 elements.
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(codes[k], a), _mm256_maddubs_epi16(m32, a));
        const int e = 128 * half128 + 32 * k;
        const __m256i scales = _mm256_setr_m128i(_mm_set1_epi16(x[b].scales[e / 16]), _mm_set1_epi16(x[b].scales[e / 16 + 1]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scales, p16));
      }
    }
    acc = accumulate(acc, y[b].d * half(x[b].d), sumi);
  }
  return finish(acc);
}

float dot_q4_K_repacked(const gguf::BlockQ4_K* x, const BlockQ8_K* y, int64_t blocks, bool in_group) {
  float acc = 0, acc_min = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const gguf::BlockQ4_K& w = x[b];
    const float scale = half(w.d) * y[b].d, min_scale = half(w.dmin) * y[b].d;
    int32_t isum = 0, imin = 0;
    for (int c = 0; c < 4; ++c) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * c));
      const __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f));
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0f));
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * c + h;
        const int32_t dot = horizontal_sum(lane_sums_us(h == 0 ? low : high, load(y[b].qs + 32 * s)));
        const gguf::KScaleMin k = gguf::unpack_k_scale_min(w.scales, s);
        isum += k.scale * dot;
        imin += k.min * (y[b].bsums[2 * s] + y[b].bsums[2 * s + 1]);
      }
      if (in_group || c == 3) {
        acc = std::fma(static_cast<float>(isum), scale, acc);
        acc_min = std::fma(static_cast<float>(imin), min_scale, acc_min);
        isum = imin = 0;
      }
    }
  }
  return acc - acc_min;
}

}  // namespace cellm::cpu::ggml::avx2
