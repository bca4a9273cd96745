#pragma once
// Products of GGUF weight matrices with float activations on the CPU: the linear layers of
// every model. Quantized weights meet activations quantized per block the way llama.cpp pairs
// them (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants) and are multiplied
// with integer dot products; F32/F16/BF16 weights are widened to float on the fly.
//
// Batch invariance (DESIGN.md section 6): out[t][n] is computed by the same sequence of
// floating-point operations whatever T, the thread count or the tiling, so a row's result is
// bit-identical alone or inside any batch. Different ISA paths may differ in the last bits.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace cellm::cpu {

// A GGUF weight: `rows` outputs, each a dot product over `cols` inputs, stored row-major as
// whole blocks; row n starts at data + n * row_bytes.
struct WeightMatrix {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
};

// The instruction-set paths of the kernels. The default is the best one the CPU has, unless
// the environment variable CELLM_CPU_ISA (portable|avx2|avx512) forces one.
enum class MatmulIsa { Portable, Avx2, Avx512 };

std::string_view matmul_isa_name(MatmulIsa isa);
bool matmul_isa_available(MatmulIsa isa);
MatmulIsa default_matmul_isa();  // throws when CELLM_CPU_ISA names an unknown or missing path
bool matmul_supports(DType type);

// Buffers one executor reuses across calls (quantized activations, per-thread work areas), so
// a matmul allocates only when a call is larger than every call before it.
class MatmulScratch {
 public:
  MatmulScratch();
  ~MatmulScratch();
  MatmulScratch(const MatmulScratch&) = delete;
  MatmulScratch& operator=(const MatmulScratch&) = delete;

  struct Buffers;
  Buffers& buffers() { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

// out[t * out_stride + n] = sum_k x[t * x_stride + k] * W[n][k] (+ bias[n] when bias is not
// null), for t in [0, T) and n in [0, w.rows). Throws InvalidArgument when w.cols is not a
// whole number of blocks or a stride is too small, Unsupported for other weight types.
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t x_stride, int64_t T, float* out,
            int64_t out_stride, const float* bias, MatmulScratch& scratch);

// The same on a chosen ISA path (tests and benchmarks compare paths with it); throws
// Unsupported when this CPU lacks the path.
void matmul(MatmulIsa isa, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t x_stride, int64_t T,
            float* out, int64_t out_stride, const float* bias, MatmulScratch& scratch);

// The same for one weight whose rows lie in several matrices of one type and width, in order
// (stacked projections computed where the file maps them, with no copy): the outputs of part p
// are the columns after those of the parts before it. The activations are quantized once,
// and each output is computed exactly as it would be from one matrix holding all the rows.
void matmul(ThreadPool& pool, std::span<const WeightMatrix> parts, const float* x, int64_t x_stride, int64_t T,
            float* out, int64_t out_stride, const float* bias, MatmulScratch& scratch);
void matmul(MatmulIsa isa, ThreadPool& pool, std::span<const WeightMatrix> parts, const float* x, int64_t x_stride,
            int64_t T, float* out, int64_t out_stride, const float* bias, MatmulScratch& scratch);

}  // namespace cellm::cpu
