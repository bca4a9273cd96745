#pragma once
// One output of ggml's CPU matmul: a weight row times a quantized activation row, in the
// order of ggml's kernels for that format (arch/x86/quants.c, repack.cpp, the same in both
// builds). Every block's products are summed exactly in integers, eight lanes of four
// elements each (lane l of a 32-element group takes elements 4l..4l+3); the lanes' scaled sums
// accumulate across blocks with fused multiply-adds, and the eight lanes are summed last
// (hsum8). The Q4_K product of a repacked tensor (ggml repacks Q4_K matrices whose row count
// is a multiple of 8) accumulates exact sums in one float chain instead: one sum per
// super-block in ggml_gemv_q4_K_8x8_q8_K, one per 64 elements (two sub-blocks) in the 4-row
// groups of ggml_gemm_q4_K_8x8_q8_K (`in_group`). A repacked Q4_0 matrix (likewise) sums each
// 32-element block exactly and accumulates the blocks in one chain, in both of its kernels.
//
// These are the reference versions; ggml_dot_avx2.cpp computes the same with AVX2.
#include <cstdint>

#include "backend/cpu/ggml/ggml_quantize.h"
#include "gguf/quant_blocks.h"

namespace cellm::cpu::ggml {

float dot_q4_0(const gguf::BlockQ4_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q4_0_repacked(const gguf::BlockQ4_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q4_1(const gguf::BlockQ4_1* x, const BlockQ8_1* y, int64_t blocks);
float dot_q5_0(const gguf::BlockQ5_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q5_1(const gguf::BlockQ5_1* x, const BlockQ8_1* y, int64_t blocks);
float dot_q8_0(const gguf::BlockQ8_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q6_K(const gguf::BlockQ6_K* x, const gguf::BlockQ8_K* y, int64_t blocks);
float dot_q4_K_repacked(const gguf::BlockQ4_K* x, const gguf::BlockQ8_K* y, int64_t blocks, bool in_group);

// The Q4_1/Q5_1 products' second part: m * s of each block added to a scalar sum, fused (as GCC
// compiles ggml's `summs += m * s`). Both versions below add it to their lanes' sum.
float offset_sum(const gguf::BlockQ4_1* x, const BlockQ8_1* y, int64_t blocks);
float offset_sum(const gguf::BlockQ5_1* x, const BlockQ8_1* y, int64_t blocks);

// The same products with AVX2 (ggml_dot_avx2.cpp), for processors with AVX2, FMA and F16C.
namespace avx2 {
float dot_q4_0(const gguf::BlockQ4_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q4_0_repacked(const gguf::BlockQ4_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q4_1(const gguf::BlockQ4_1* x, const BlockQ8_1* y, int64_t blocks);
float dot_q5_0(const gguf::BlockQ5_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q5_1(const gguf::BlockQ5_1* x, const BlockQ8_1* y, int64_t blocks);
float dot_q8_0(const gguf::BlockQ8_0* x, const gguf::BlockQ8_0* y, int64_t blocks);
float dot_q6_K(const gguf::BlockQ6_K* x, const gguf::BlockQ8_K* y, int64_t blocks);
float dot_q4_K_repacked(const gguf::BlockQ4_K* x, const gguf::BlockQ8_K* y, int64_t blocks, bool in_group);
}  // namespace avx2

}  // namespace cellm::cpu::ggml
