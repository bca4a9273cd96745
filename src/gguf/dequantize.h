#pragma once
// Reference dequantization of GGUF weight formats to float32. The results equal the `gguf`
// Python package's numpy dequantizer bit for bit (tests/py/test_dequant_vs_gguf.py checks
// every tensor of the default models), which is the definition fast kernels are tested
// against.
#include <cstdint>

#include "core/dtype.h"

namespace cellm::gguf {

// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and Q8_K.
bool can_dequantize(DType type);

// Decodes n elements (a whole number of blocks) of `type` from src into dst. Throws
// InvalidArgument when n is not a multiple of the block size, Unsupported for other types.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

}  // namespace cellm::gguf
