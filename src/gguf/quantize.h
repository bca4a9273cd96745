#pragma once
// Quantization of float32 rows into GGUF block formats (model conversion, tests, activations
// for quantized dot products). Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16 and BF16 equal the `gguf`
// Python package's numpy quantizers bit for bit. The k-quants (Q4_K, Q5_K, Q6_K) search
// sub-block scales by least squares; they are good quantizations, not ggml's exact bytes.
// Q8_K is the activation format of k-quant dot products (with its per-16 sums filled in).
// Inputs are expected to be finite; other values give unspecified (but safe) output.
#include <cstdint>

#include "core/dtype.h"

namespace cellm::gguf {

bool can_quantize(DType type);

// Encodes n elements (a whole number of blocks) of src as `type` into dst, which must hold
// row_bytes(type, n). Throws InvalidArgument when n is not a multiple of the block size,
// Unsupported for types it cannot produce.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace cellm::gguf
