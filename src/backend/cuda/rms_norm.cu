// RMSNorm over groups of a row: one block per (group, row), computing exactly what the CPU
// kernel computes: the sum of squares in double in the order of backend/rms_norm_order.h (a
// thread per partial, a warp's xor shuffles, then the warps' sums halved), then mean, 1/sqrt
// and the scaling with the same float roundings. A last-bit difference here would reach every
// element of the row and, through the activation quantization of the next matrix product, the
// tokens.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/rms_norm_order.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = backend::kRmsNormPartials;  // one partial sum per thread
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, size_t x_stride, const float* weight,
                                                            int group, float eps, float* out, size_t out_stride) {
  allow_next_kernel();
  wait_for_inputs();
  __shared__ double runs[kWarps];
  __shared__ float inv_s;
  const float* xr = x + blockIdx.y * x_stride + static_cast<size_t>(blockIdx.x) * group;
  float* yr = out + blockIdx.y * out_stride + static_cast<size_t>(blockIdx.x) * group;
  double part = 0;
#pragma unroll 16  // the row's loads in flight together (a 4096-wide row is 16 per thread)
  for (int i = threadIdx.x; i < group; i += kThreads) part += static_cast<double>(xr[i]) * xr[i];
#pragma unroll
  for (int s = 16; s >= 1; s /= 2) part += __shfl_xor_sync(0xffffffffu, part, s);
  if (threadIdx.x % 32 == 0) runs[threadIdx.x / 32] = part;
  __syncthreads();
  if (threadIdx.x == 0) {
    double r[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) r[w] = runs[w];
#pragma unroll
    for (int s = kWarps / 2; s >= 1; s /= 2)
#pragma unroll
      for (int w = 0; w < s; ++w) r[w] += r[w + s];
    const auto mean = static_cast<float>(r[0] / group);
    inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
  __syncthreads();
  const float inv = inv_s;
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
      if (i < group) yr[i] = __fmul_rn(__fmul_rn(xv[b], inv), wv[b]);
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
