#pragma once
// What the AVX-512 kernel files share (they are compiled with the same ISA flags; see
// matmul_avx512.cpp for the scheme). Internal linkage, like matmul_tiles.h.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"
#include "gguf/quant_blocks.h"

// GCC 12's own _mm512_undefined_* intrinsics trip its uninitialized-value warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cellm::cpu::detail {

// The quantized kernels of the other AVX-512 files, by weight type (null for other types).
TileKernel avx512_block32_kernel(DType type);
size_t avx512_block32_work_bytes(int64_t cols);
TileKernel avx512_kquant_kernel(DType type);
size_t avx512_kquant_work_bytes(int64_t cols);

namespace {

// Rows per panel: one per lane of a 512-bit vector of 32-bit sums.
constexpr int kPanelRows = 16;

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline int32_t load_word(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Writes the first nr lanes (one output row each) of token t's results, plus the bias.
inline void store_lanes(const TileJob& job, __m512 v, int64_t t, int64_t n0, int nr) {
  const auto mask = static_cast<__mmask16>((1u << nr) - 1);
  if (job.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, job.bias + n0));
  _mm512_mask_storeu_ps(job.out + t * job.out_stride + n0, mask, v);
}

// In-register transpose of a 16 x 16 matrix of 32-bit elements: lane k of m[r] moves to lane r
// of m[k].
inline void transpose16(__m512i m[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(m[2 * i], m[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(m[2 * i], m[2 * i + 1]);
  }
  __m512i u[16];  // u[4i + c], 128-bit lane L: rows 4i..4i+3 of column 4L + c
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // a 4 x 4 transpose of 128-bit lanes
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    m[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    m[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    m[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    m[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

// A mask of the first `bytes` bytes (none when bytes <= 0).
inline __mmask64 byte_mask(int64_t bytes) { return bytes >= 64 ? ~0ull : (1ull << std::max<int64_t>(bytes, 0)) - 1; }

inline float fp16_value(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

}  // namespace
}  // namespace cellm::cpu::detail
