#pragma once
// out = x . w^T (+ a bias per weight row, or a residual per output: ProductAddend) on the GPU.
//
// Default: the exact path (matmul_kernels.h). Activations are quantized on the GPU exactly as
// the CPU quantizes them (Q8_0 / Q8_1 / Q8_K by weight type), blocks are multiplied in
// integers and scaled and summed in the CPU's AVX-512 order; F32/F16/BF16 weights meet f32
// activations. GPU and CPU logits therefore agree to the last bit on AVX-512 CPUs (to float
// summation order on others), and every row's result is the same alone or in any batch, for
// every row count: decode rows and prefill slices take the same kernels (weights streamed once
// per tile of 8 rows; tiles running side by side share them through L2).
//
// Opt-in: CELLM_CUDA_GEMM=bf16 sends products of more than kGemvMaxRows rows (prefill) to
// tensor cores through cuBLAS: weights dequantized to bf16 in slices of rows, activations
// converted to bf16, f32 accumulation. Much faster for long prompts, but it rounds both operands
// to 8 significant bits, so its logits drift from the CPU's (greedy tokens can differ at near
// ties) and a prompt's prefill no longer matches a decode of the same rows bit for bit.
// Operands the exact kernels do not take (unaligned rows, an inner dimension that is not whole
// 32-element blocks) also go to cuBLAS.
// All scratch is allocated once here, so a forward allocates nothing (CUDA-graph capture).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/matmul_kernels.h"
#include "backend/ops.h"

namespace cellm::cuda {

// The row count above which CELLM_CUDA_GEMM=bf16 takes the tensor-core path.
inline constexpr int64_t kGemvMaxRows = 16;

class Matmul {
 public:
  enum class LargeRows { Exact, Bf16 };  // what products of more than kGemvMaxRows rows use

  Matmul(cudaStream_t stream, DeviceMemory& memory);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void run(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
           const backend::TensorRef& out);
  // normed = rms_norm(x, norm_weight) over whole rows, then run(normed, w, addend, out), the same
  // bits; where run would quantize the activations in a launch of their own, the norm's kernel
  // quantizes them instead.
  void run_normed(const backend::TensorRef& x, const float* norm_weight, float eps, const backend::TensorRef& normed,
                  const backend::TensorRef& w, const ProductAddend& addend, const backend::TensorRef& out);
  // glu_out = act(gate) * up, then run(glu_out, w, addend, out), the same bits; where run would
  // quantize the activations in a launch of their own, the GLU's kernel quantizes them instead.
  void run_after_glu(const backend::TensorRef& gate, const backend::TensorRef& up, backend::GluActivation act,
                     const backend::TensorRef& glu_out, const backend::TensorRef& w, const ProductAddend& addend,
                     const backend::TensorRef& out);
  // x is made by a producer kernel (the norm, the GLU, attention), then multiplied as
  // run(x, w, addend, out) would: where run would quantize x in a launch of its own and
  // fits(format) says the producer can write that format, quantizing(format, q) makes x and its
  // quantized form in one launch; otherwise plain() makes x and run multiplies it.
  template <class Fits, class Plain, class Quantizing>
  void run_produced(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
                    const backend::TensorRef& out, Fits fits, Plain plain, Quantizing quantizing) {
    ActivationFormat format;
    if (out.rows != x.rows || out.cols != w.rows || out.dtype != DType::F32 || !quantizes_apart(x, w, format) ||
        !fits(format)) {
      plain();
      return run(x, w, addend, out);
    }
    if (x.rows == 0) return;
    const QuantizedActivations q = carve_quantized_activations(q_scratch_, x.rows, x.cols);
    quantizing(format, q);
    launch_exact_matmul(x, q, w, addend, out, sm_count_, stream_);
  }
  // The bf16 tensor-core path whatever the row count (tests compare the paths with it).
  void run_gemm(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
                const backend::TensorRef& out);
  LargeRows large_rows() const { return large_rows_; }

 private:
  void run_exact(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
                 const backend::TensorRef& out);
  // Whether the one-row product kernel quantizes x itself (each of its blocks, the whole row).
  bool product_quantizes_itself(const backend::TensorRef& x, const backend::TensorRef& w) const;
  // Whether run(x, w) quantizes all of x in one launch of its own, and in which format.
  bool quantizes_apart(const backend::TensorRef& x, const backend::TensorRef& w, ActivationFormat& format) const;
  void gemm_bf16(const void* w, int64_t lda, const void* x, int64_t n_rows, int64_t t_rows, int64_t k, float* out,
                 int64_t ldc);
  void free_all();

  cudaStream_t stream_;
  DeviceMemory& memory_;
  LargeRows large_rows_ = LargeRows::Exact;
  int sm_count_ = 1;
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* w_scratch_ = nullptr;  // bf16 weight rows
  void* x_scratch_ = nullptr;  // bf16 activation rows
  void* q_scratch_ = nullptr;  // quantized activation rows of the exact path
};

}  // namespace cellm::cuda
