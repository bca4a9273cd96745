#include "backend/cuda/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kWeightScratchElems = size_t{32} << 20;  // 64 MiB of bf16
constexpr size_t kActScratchElems = size_t{16} << 20;     // 32 MiB of bf16
constexpr int64_t kQuantizedElems = int64_t{8} << 20;     // exact path: activation rows x K quantized at once

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (status == CUBLAS_STATUS_ALLOC_FAILED) fail(ErrorCode::OutOfMemory, what, ": cuBLAS could not allocate");
  fail(ErrorCode::Internal, what, ": cuBLAS status ", static_cast<int>(status));
}

Matmul::LargeRows large_rows_from_env() {
  const char* v = std::getenv("CELLM_CUDA_GEMM");
  if (v == nullptr || *v == '\0' || std::string(v) == "exact") return Matmul::LargeRows::Exact;
  if (std::string(v) == "bf16") return Matmul::LargeRows::Bf16;
  fail(ErrorCode::InvalidArgument, "CELLM_CUDA_GEMM must be 'exact' or 'bf16', not '", v, "'");
}

}  // namespace

Matmul::Matmul(cudaStream_t stream, DeviceMemory& memory)
    : stream_(stream), memory_(memory), large_rows_(large_rows_from_env()) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  check_blas(cublasCreate(&handle_), "cublasCreate");
  try {
    check_blas(cublasSetStream(handle_, stream_), "cublasSetStream");
    workspace_ = memory_.allocate(kWorkspaceBytes, "cuBLAS workspace");
    check_blas(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
    check_blas(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    w_scratch_ = memory_.allocate(kWeightScratchElems * 2, "matmul weight scratch");
    x_scratch_ = memory_.allocate(kActScratchElems * 2, "matmul activation scratch");
    q_scratch_ = memory_.allocate(quantized_activation_bytes(1, kQuantizedElems), "matmul quantized activations");
  } catch (...) {
    free_all();
    throw;
  }
}

Matmul::~Matmul() { free_all(); }

void Matmul::free_all() {
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
  handle_ = nullptr;
  for (void** p : {&workspace_, &w_scratch_, &x_scratch_, &q_scratch_}) {
    try {
      memory_.release(*p);
    } catch (...) {
    }
    *p = nullptr;
  }
}

void Matmul::run(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
                 const backend::TensorRef& out) {
  if (x.cols != w.cols || out.cols != w.rows || out.rows != x.rows || out.dtype != DType::F32)
    fail(ErrorCode::Internal, "matmul: x [", x.rows, " x ", x.cols, "] . w [", w.rows, " x ", w.cols, "]^T -> out [",
         out.rows, " x ", out.cols, "]");
  if (x.rows == 0) return;
  if (large_rows_ == LargeRows::Bf16 && x.rows > kGemvMaxRows) return run_gemm(x, w, addend, out);
  if (exact_matmul_supported(x, w)) return run_exact(x, w, addend, out);
  run_gemm(x, w, addend, out);
}

// One row (single-stream decode): while launches are made one by one, a short row is quantized
// by the product kernel itself, a launch fewer. A step being captured as a CUDA graph pays next to
// nothing per launch; there the row is quantized once, apart (or by the norm or GLU kernel that
// makes it), and the product's blocks start on their weights as soon as they may instead of each
// quantizing the row first. SmolLM2's shape, H200, batch 1, one run: graphs 1226 -> 1348 tok/s
// (1.10x, a step's critical path 777 -> 712 us) quantizing apart; eager 832 -> 676 tok/s had it
// done so too (30 launches more per step).
bool Matmul::product_quantizes_itself(const backend::TensorRef& x, const backend::TensorRef& w) const {
  return x.rows == 1 && gemv_one_token_supported(w) && x.cols <= kGemvQuantizeMaxColumns &&
         !stream_is_capturing(stream_);
}

bool Matmul::quantizes_apart(const backend::TensorRef& x, const backend::TensorRef& w, ActivationFormat& format) const {
  if (large_rows_ == LargeRows::Bf16 && x.rows > kGemvMaxRows) return false;
  if (!exact_matmul_supported(x, w) || !activation_format_for(w.dtype, format)) return false;
  if (product_quantizes_itself(x, w)) return false;
  return x.rows <= kQuantizedElems / x.cols;  // one chunk of run_exact
}

void Matmul::run_normed(const backend::TensorRef& x, const float* norm_weight, float eps,
                        const backend::TensorRef& normed, const backend::TensorRef& w, const ProductAddend& addend,
                        const backend::TensorRef& out) {
  run_produced(
      normed, w, addend, out,
      [&](ActivationFormat format) { return rms_norm_quantize_supported(x, norm_weight, normed, format); },
      [&] { launch_rms_norm(x, norm_weight, static_cast<int32_t>(x.cols), eps, normed, stream_); },
      [&](ActivationFormat format, const QuantizedActivations& q) {
        launch_rms_norm_quantize(x, norm_weight, eps, normed, format, q, stream_);
      });
}

void Matmul::run_after_glu(const backend::TensorRef& gate, const backend::TensorRef& up, backend::GluActivation act,
                           const backend::TensorRef& glu_out, const backend::TensorRef& w,
                           const ProductAddend& addend, const backend::TensorRef& out) {
  run_produced(
      glu_out, w, addend, out,
      [&](ActivationFormat format) { return glu_quantize_supported(gate, up, glu_out, format); },
      [&] { launch_glu(gate, up, act, glu_out, stream_); },
      [&](ActivationFormat format, const QuantizedActivations& q) {
        launch_glu_quantize(gate, up, act, glu_out, format, q, stream_);
      });
}

void Matmul::run_exact(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
                       const backend::TensorRef& out) {
  ActivationFormat format;
  if (!activation_format_for(w.dtype, format)) return launch_exact_matmul(x, {}, w, addend, out, sm_count_, stream_);
  if (product_quantizes_itself(x, w)) return launch_gemv_one_token(x, nullptr, w, addend, out, sm_count_, stream_);
  // Rows in chunks that fit the quantized-activation scratch.
  const int64_t chunk = kQuantizedElems / x.cols;
  if (chunk == 0) fail(ErrorCode::Unsupported, "matmul inner dimension ", x.cols, " exceeds the CUDA scratch");
  for (int64_t t0 = 0; t0 < x.rows; t0 += chunk) {
    const int64_t rows = std::min(chunk, x.rows - t0);
    backend::TensorRef xs = x, os = out;
    xs.data = x.row<float>(t0);
    xs.rows = rows;
    os.data = out.row<float>(t0);
    os.rows = rows;
    const QuantizedActivations q = carve_quantized_activations(q_scratch_, rows, x.cols);
    launch_quantize_activations(xs, format, q, stream_);
    launch_exact_matmul(xs, q, w, addend.from_row(t0), os, sm_count_, stream_);
  }
}

void Matmul::gemm_bf16(const void* w, int64_t lda, const void* x, int64_t n_rows, int64_t t_rows, int64_t k,
                       float* out, int64_t ldc) {
  // Row-major out[t][n] is column-major out^T (n x t): out^T = W (k x n, column-major)^T . X^T.
  const float one = 1.0f, zero = 0.0f;
  check_blas(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_rows), static_cast<int>(t_rows),
                          static_cast<int>(k), &one, w, CUDA_R_16BF, static_cast<int>(lda), x, CUDA_R_16BF,
                          static_cast<int>(k), &zero, out, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx (bf16)");
}

void Matmul::run_gemm(const backend::TensorRef& x, const backend::TensorRef& w, const ProductAddend& addend,
                      const backend::TensorRef& out) {
  const int64_t T = x.rows, N = w.rows, K = w.cols;
  if (T == 0) return;
  if (x.dtype != DType::F32) fail(ErrorCode::Internal, "matmul activations must be f32");
  if (K > int64_t{1} << 30 || N > int64_t{1} << 30 || T > int64_t{1} << 30)
    fail(ErrorCode::Unsupported, "matmul of ", T, " x ", K, " by ", N, " rows is too large");
  const int64_t ldc = static_cast<int64_t>(out.row_stride / sizeof(float));
  auto* out_data = static_cast<float*>(out.data);

  if (w.dtype == DType::F32) {
    const float one = 1.0f, zero = 0.0f;
    check_blas(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(T),
                            static_cast<int>(K), &one, w.data, CUDA_R_32F, static_cast<int>(w.row_stride / 4), x.data,
                            CUDA_R_32F, static_cast<int>(x.row_stride / 4), &zero, out_data, CUDA_R_32F,
                            static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (f32)");
  } else {
    if (static_cast<size_t>(K) > kActScratchElems || static_cast<size_t>(K) > kWeightScratchElems)
      fail(ErrorCode::Unsupported, "matmul inner dimension ", K, " exceeds the CUDA scratch buffers");
    const int64_t t_chunk = std::min<int64_t>(T, static_cast<int64_t>(kActScratchElems / static_cast<size_t>(K)));
    const bool direct = w.dtype == DType::BF16 && w.row_stride % 2 == 0;
    const int64_t n_chunk =
        direct ? N : std::min<int64_t>(N, static_cast<int64_t>(kWeightScratchElems / static_cast<size_t>(K)));
    const bool x_once = t_chunk == T;
    if (x_once) launch_convert_bf16(x, 0, T, x_scratch_, stream_);
    for (int64_t n0 = 0; n0 < N; n0 += n_chunk) {
      const int64_t nc = std::min(n_chunk, N - n0);
      const void* w_rows = static_cast<const char*>(w.data) + static_cast<size_t>(n0) * w.row_stride;
      int64_t lda = direct ? static_cast<int64_t>(w.row_stride / 2) : K;
      if (!direct) {
        launch_dequantize_bf16(w, n0, nc, w_scratch_, stream_);
        w_rows = w_scratch_;
      }
      for (int64_t t0 = 0; t0 < T; t0 += t_chunk) {
        const int64_t tc = std::min(t_chunk, T - t0);
        if (!x_once) launch_convert_bf16(x, t0, tc, x_scratch_, stream_);
        gemm_bf16(w_rows, lda, x_scratch_, nc, tc, K, out_data + static_cast<size_t>(t0) * ldc + n0, ldc);
      }
    }
  }
  if (addend.bias != nullptr) launch_add_bias(out, addend.bias, stream_);
  if (addend.residual != nullptr) {
    const backend::TensorRef residual{const_cast<float*>(addend.residual), DType::F32, out.rows, out.cols,
                                      addend.residual_stride * sizeof(float)};
    launch_add(out, residual, out, stream_);
  }
}

}  // namespace cellm::cuda
