#pragma once
// Encoders of the 256-element k-quant super-blocks: quantize_row's back end for Q4_K, Q5_K,
// Q6_K (weights) and Q8_K (activations).
#include "gguf/quant_blocks.h"

namespace cellm::gguf {

void encode_block(const float* x, BlockQ4_K& block);
void encode_block(const float* x, BlockQ5_K& block);
void encode_block(const float* x, BlockQ6_K& block);
void encode_block(const float* x, BlockQ8_K& block);

}  // namespace cellm::gguf
