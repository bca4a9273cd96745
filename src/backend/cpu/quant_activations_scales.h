#pragma once
// The per-block scalar steps of activation quantization, shared by the portable and the SIMD
// quantizers so both round identically. Compiled once, without ISA flags (quant_activations.cpp).
#include <cstdint>

namespace cellm::cpu::detail {

struct Q8BlockScale {
  float d;        // fp16(amax / 127) widened back to float: what the dot products multiply by
  float d_exact;  // amax / 127 before rounding (Q8_1 sums use it, as llama.cpp does)
  float inverse;  // 127 / amax, or 0 for an all-zero block
};
Q8BlockScale q8_block_scale(float amax);

// fp16(d_exact * sum) widened to float.
float q8_1_block_sum(float d_exact, int32_t code_sum);

struct Q8KBlockScale {
  float d;        // 1 / scale
  float inverse;  // scale = -127 / signed_max
};
Q8KBlockScale q8_k_block_scale(float signed_max);

}  // namespace cellm::cpu::detail
