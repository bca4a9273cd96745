#pragma once
// ggml's CPU matmul: each activation row quantized to the weight format's partner type, then
// every output a ggml_dot.h product of one weight row with one activation row. llamafile's
// tiles, which ggml takes for T >= 2 rows, compute the same products as its vector dots.
// Repacked Q4_0 and Q4_K weights (rows a multiple of 8) have products of their own; with T > 3
// rows, rows [0, T - T % 4) of a Q4_K product go through its 4-row kernel, which quantizes with
// its own sign rule (ggml_quantize.h) and accumulates per 64 elements; the rest through the
// one-row kernel.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace cellm::cpu::ggml {

bool matmul_supports(DType type);
// Throws Unsupported, naming `type` (and `tensor`, when given) and the supported formats, unless
// matmul_supports(type).
void require_product(DType type, const std::string& tensor = "");

// The buffer one backend reuses across calls for the quantized activations: it only grows.
class MatmulBuffers {
 public:
  std::byte* reserve(size_t bytes);

 private:
  std::vector<std::byte> bytes_;
};

// out[t][n] = x[t] . W[n] (+ bias[n]) for the rows of `parts` in order (stacked weights).
void matmul(ThreadPool& pool, std::span<const WeightMatrix> parts, const float* x, int64_t x_stride, int64_t T,
            float* out, int64_t out_stride, const float* bias, MatmulBuffers& buffers);

}  // namespace cellm::cpu::ggml
