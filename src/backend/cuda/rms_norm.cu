// RMSNorm over groups of a row: one block per (group, row), computing exactly what the CPU
// kernel computes: the sum of squares in double, in element order (the squares of floats are
// exact in double, so only the order of the additions matters, and it is the CPU's), then
// mean, 1/sqrt and the scaling with the same float roundings. A last-bit difference here would
// reach every element of the row and, through the activation quantization of the next matrix
// product, the tokens. The sequential sum costs a few microseconds per row; the loads ahead of
// it are issued in parallel into shared memory.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kStaged = 4096;  // floats staged per round

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, size_t x_stride, const float* weight,
                                                            int group, float eps, float* out, size_t out_stride) {
  __shared__ float staged[kStaged];
  __shared__ float inv_s;
  const float* xr = x + blockIdx.y * x_stride + static_cast<size_t>(blockIdx.x) * group;
  float* yr = out + blockIdx.y * out_stride + static_cast<size_t>(blockIdx.x) * group;
  double sum = 0;
  for (int base = 0; base < group; base += kStaged) {
    const int n = min(kStaged, group - base);
    for (int i = threadIdx.x; i < n; i += kThreads) staged[i] = xr[base + i];
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; i < n; ++i) sum += static_cast<double>(staged[i]) * staged[i];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const auto mean = static_cast<float>(sum / group);
    inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
  __syncthreads();
  const float inv = inv_s;
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
