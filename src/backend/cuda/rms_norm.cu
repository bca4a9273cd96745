// RMSNorm over groups of a row: one block per (group, row), computing exactly what the CPU
// kernel computes (rms_norm_row.cuh has the order and the roundings).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/rms_norm_row.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using norm::kThreads;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, size_t x_stride, const float* weight,
                                                            int group, float eps, float* out, size_t out_stride) {
  allow_next_kernel();
  prefetch_read_only(weight, sizeof(float) * static_cast<size_t>(group));
  wait_for_inputs();
  const float* xr = x + blockIdx.y * x_stride + static_cast<size_t>(blockIdx.x) * group;
  float* yr = out + blockIdx.y * out_stride + static_cast<size_t>(blockIdx.x) * group;
  const float inv = norm::inverse_rms(xr, group, eps);
  // Eight elements per thread at a time, every load before any store: out may be x itself, so
  // the compiler could not move a load above an earlier store (one load latency per element).
  constexpr int kBatch = 8;
  for (int base = 0; base < group; base += kThreads * kBatch) {
    float xv[kBatch], wv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads + threadIdx.x;
      xv[b] = i < group ? xr[i] : 0.0f;
      wv[b] = i < group ? weight[i] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads + threadIdx.x;
      if (i < group) yr[i] = norm::scaled(xv[b], inv, wv[b]);
    }
  }
}

}  // namespace

void launch_rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out,
                     cudaStream_t stream) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32) fail(ErrorCode::Internal, "rms_norm works on f32 rows");
  if (group <= 0 || x.cols % group != 0) fail(ErrorCode::Internal, "rms_norm group ", group, " does not divide ", x.cols);
  if (out.rows == 0) return;
  if (out.rows > 65535) fail(ErrorCode::Internal, "rms_norm over ", out.rows, " rows exceeds the grid");
  const dim3 grid(static_cast<unsigned>(x.cols / group), static_cast<unsigned>(out.rows));
  launch_kernel("rms_norm kernel", rms_norm_kernel, grid, kThreads, 0, stream, static_cast<const float*>(x.data),
                x.row_stride / sizeof(float), weight, group, eps, static_cast<float*>(out.data),
                out.row_stride / sizeof(float));
}

}  // namespace cellm::cuda
