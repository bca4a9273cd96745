#pragma once
// out = x . w^T (+ bias) on the GPU, choosing per call:
//  - up to kGemvMaxRows activation rows: the weight-streaming GEMV (gemv.cu), weights decoded
//    in registers; quantized weights meet activations quantized to int8 per 32 (integer dot
//    products, as on the CPU), plain weights meet f32 activations;
//  - more rows: tensor cores through cuBLAS. Weights are dequantized to bf16 in slices of rows
//    (a fixed scratch buffer), activations converted to bf16, products accumulated in f32.
//    BF16 weights are used in place; F32 weights go through an f32 GEMM (no conversion).
// All scratch is allocated once here, so a forward allocates nothing (CUDA-graph capture).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"
#include "backend/ops.h"

namespace cellm::cuda {

inline constexpr int64_t kGemvMaxRows = 16;

class Matmul {
 public:
  Matmul(cudaStream_t stream, DeviceMemory& memory);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void run(const backend::TensorRef& x, const backend::TensorRef& w, const float* bias, const backend::TensorRef& out);
  // The tensor-core path whatever the row count (tests compare the two paths with it).
  void run_gemm(const backend::TensorRef& x, const backend::TensorRef& w, const float* bias,
                const backend::TensorRef& out);

 private:
  void gemm_bf16(const void* w, int64_t lda, const void* x, int64_t n_rows, int64_t t_rows, int64_t k, float* out,
                 int64_t ldc);
  void free_all();

  cudaStream_t stream_;
  DeviceMemory& memory_;
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* w_scratch_ = nullptr;  // bf16 weight rows
  void* x_scratch_ = nullptr;  // bf16 activation rows
  void* q_scratch_ = nullptr;  // int8 activation rows with their scales and sums (GEMV)
};

}  // namespace cellm::cuda
