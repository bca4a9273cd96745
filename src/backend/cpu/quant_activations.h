#pragma once
// Quantization of float activation rows for integer dot products, following llama.cpp's x86
// definitions so our logits track its numerics (greedy-token parity):
//  - Q8_0 / Q8_1 (blocks of 32): d = fp16(amax / 127), codes = round-half-even(x * 127 / amax);
//    Q8_1 adds s = fp16(d * sum(codes)), which carries the offsets of Q4_1/Q5_1 weights.
//  - Q8_K (blocks of 256): scale -127 / (the element of largest magnitude, with its sign),
//    codes rounded half to even, d = 1 / scale, bsums = sums of 16 consecutive codes.
// Values are written unpacked (codes contiguous, scales as floats) because the kernels read
// them that way; the portable and SIMD quantizers produce identical bytes.
#include <cstdint>
#include <optional>

#include "backend/cpu/matmul.h"
#include "core/dtype.h"

namespace cellm::cpu {

enum class ActivationFormat { Q8_0, Q8_1, Q8_K };

// The activation format llama.cpp pairs with a quantized weight type; nothing for the float
// weight types (they multiply float activations).
std::optional<ActivationFormat> activation_format_for(DType weight);
int activation_block_size(ActivationFormat format);  // 32 or 256

// Where one quantized row goes. d and s hold one float per block; bsums one int16 per 16.
struct QuantizedRow {
  int8_t* qs = nullptr;
  float* d = nullptr;
  float* s = nullptr;        // Q8_1 only
  int16_t* bsums = nullptr;  // Q8_K only
};

// Quantizes `cols` floats (a whole number of blocks) with the portable code or, for the SIMD
// paths, the AVX2 code; both give the same bytes.
void quantize_activation_row(ActivationFormat format, const float* x, int64_t cols, const QuantizedRow& out,
                             MatmulIsa isa);

namespace detail {
void quantize_activation_row_avx2(ActivationFormat format, const float* x, int64_t cols, const QuantizedRow& out);
}

}  // namespace cellm::cpu
