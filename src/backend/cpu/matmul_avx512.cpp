// The AVX-512 VNNI kernels (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni, see
// src/backend/CMakeLists.txt); used only when cpu_features() reports all of them.
//
// Quantized formats put one weight row per lane: each lane accumulates, in exact integers, the
// whole dot product of a block (a super-block for the k-quants) and then takes one conversion
// and one fused multiply-add by d_w * d_a (plus the offset or min term), block after block.
// That per-output sequence is the contract: prefill gets it from repacked 16-row panels and
// vpdpbusd with broadcast activations; decode (few tokens) dots rows in element order, reduces
// the integer block sums exactly and runs the same float steps, so results are bit-identical.
//  - 32-element blocks: weight codes enter vpdpbusd as unsigned bytes (value + offset); the
//    offset times the activation sum is subtracted in integers.
//  - k-quants: sub-block scales are applied in integers, as llama.cpp does; the min (Q4_K,
//    Q5_K) or the -32 offset (Q6_K) comes from Q8_K's group sums.
//  - Float weights: 16 lanes along the row and a fixed reduction at the end.
#include "backend/cpu/matmul_avx512_common.h"

namespace cellm::cpu::detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Float weights: 16 lanes, one fused multiply-add per 16 weights; the tail is masked to zeros.

struct F32Format {
  static __m512 load(const void* row, int64_t k) { return _mm512_loadu_ps(static_cast<const float*>(row) + k); }
  static __m512 load_tail(const void* row, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
  }
};

struct F16Format {
  static __m512 load(const void* row, int64_t k) { return _mm512_cvtph_ps(load256(static_cast<const uint16_t*>(row) + k)); }
  static __m512 load_tail(const void* row, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k));
  }
};

struct BF16Format {
  static __m512 widen(__m256i bits) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)); }
  static __m512 load(const void* row, int64_t k) { return widen(load256(static_cast<const uint16_t*>(row) + k)); }
  static __m512 load_tail(const void* row, int64_t k, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k));
  }
};

template <class Format>
struct FloatKernel {
  static constexpr int kTokens = 4;
  static constexpr int kRows = 4;
  static size_t work_bytes(int64_t) { return 0; }
  static void prepare(const TileJob&, int64_t, int, std::byte*) {}

  template <int MT, int NR>
  static void tile(const TileJob& job, int64_t t0, int64_t n0, const std::byte*) {
    const int64_t cols = job.w->cols;
    const auto rows = weight_rows<std::byte, NR>(job, n0);
    const float* x[MT];
    for (int i = 0; i < MT; ++i) x[i] = job.x + (t0 + i) * job.x_stride;
    __m512 acc[MT][NR];
    for (int i = 0; i < MT; ++i)
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
      for (int r = 0; r < NR; ++r) {
        const __m512 w = Format::load(rows[r], k);
        for (int i = 0; i < MT; ++i) acc[i][r] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x[i] + k), acc[i][r]);
      }
    }
    if (k < cols) {
      const auto m = static_cast<__mmask16>((1u << (cols - k)) - 1);
      for (int r = 0; r < NR; ++r) {
        const __m512 w = Format::load_tail(rows[r], k, m);
        for (int i = 0; i < MT; ++i) acc[i][r] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, x[i] + k), acc[i][r]);
      }
    }
    store_tile<MT, NR>(job, t0, n0, [&](int i, int r) { return _mm512_reduce_add_ps(acc[i][r]); });
  }
};

TileKernel kernel_for(DType type) {
  switch (type) {
    case DType::F32: return &walk_tiles<FloatKernel<F32Format>>;
    case DType::F16: return &walk_tiles<FloatKernel<F16Format>>;
    case DType::BF16: return &walk_tiles<FloatKernel<BF16Format>>;
    default: break;
  }
  if (TileKernel k = avx512_block32_kernel(type)) return k;
  return avx512_kquant_kernel(type);
}

size_t work_bytes(DType type, int64_t cols) {
  switch (dtype_info(type).block_size) {
    case 32: return avx512_block32_work_bytes(cols);
    case 256: return avx512_kquant_work_bytes(cols);
    default: return 0;
  }
}

}  // namespace

const KernelSet& avx512_kernels() {
  static const KernelSet kernels{&kernel_for, &work_bytes};
  return kernels;
}

}  // namespace cellm::cpu::detail
