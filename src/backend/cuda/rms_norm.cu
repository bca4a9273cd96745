// RMSNorm over groups of a row: one block per (group, row). The sum of squares is taken in
// float in a fixed order (per thread, then across the block), so results do not depend on
// how many rows a step has.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, size_t x_stride, const float* weight,
                                                            int group, float eps, float* out, size_t out_stride) {
  __shared__ float scratch[kThreads / 32];
  const float* xr = x + blockIdx.y * x_stride + static_cast<size_t>(blockIdx.x) * group;
  float* yr = out + blockIdx.y * out_stride + static_cast<size_t>(blockIdx.x) * group;
  float sum = 0;
  for (int i = threadIdx.x; i < group; i += kThreads) sum = fmaf(xr[i], xr[i], sum);
  sum = block_sum<kThreads>(sum, scratch);
  const float mean = sum / static_cast<float>(group);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int i = threadIdx.x; i < group; i += kThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), weight[i]);
}

}  // namespace

void launch_rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out,
                     cudaStream_t stream) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32) fail(ErrorCode::Internal, "rms_norm works on f32 rows");
  if (group <= 0 || x.cols % group != 0) fail(ErrorCode::Internal, "rms_norm group ", group, " does not divide ", x.cols);
  if (out.rows == 0) return;
  if (out.rows > 65535) fail(ErrorCode::Internal, "rms_norm over ", out.rows, " rows exceeds the grid");
  const dim3 grid(static_cast<unsigned>(x.cols / group), static_cast<unsigned>(out.rows));
  rms_norm_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), x.row_stride / sizeof(float),
                                                 weight, group, eps, static_cast<float*>(out.data),
                                                 out.row_stride / sizeof(float));
  check_launch("rms_norm kernel");
}

}  // namespace cellm::cuda
