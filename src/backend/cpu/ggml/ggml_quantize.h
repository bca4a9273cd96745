#pragma once
// How ggml's CPU build quantizes a matmul's activations (its "vec_dot_type" rows): Q8_0 and
// Q8_1 as the AVX2 code of arch/x86/quants.c does (both builds run it), Q8_K as
// quantize_row_q8_K_ref does, or as the 4-row interleaving quantizer of the repacked Q4_K
// product does (it differs from the reference only in which sign wins when +max and -max
// are both in a block).
#include <cstdint>

#include "gguf/quant_blocks.h"

namespace cellm::cpu::ggml {

// ggml's block_q8_1: a Q8_0 block with s = d * sum(qs) as fp16, for the Q4_1/Q5_1 products.
#pragma pack(push, 1)
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[gguf::kBlockElements];
};
#pragma pack(pop)

// k floats (a multiple of the block size) into k / block blocks.
void quantize_q8_0(const float* x, gguf::BlockQ8_0* y, int64_t k);
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t k);
// `positive_max_wins`: the 4-row quantizer's choice of sign (ggml_quantize_mat_q8_K_4x8).
void quantize_q8_K(const float* x, gguf::BlockQ8_K* y, int64_t k, bool positive_max_wins);

}  // namespace cellm::cpu::ggml
