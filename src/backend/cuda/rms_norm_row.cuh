#pragma once
// RMSNorm's row factor on the GPU, shared by the plain norm (rms_norm.cu) and the norm that
// quantizes its output for the next product (rms_norm_quantize.cu): the sum of squares in
// double in the order of backend/rms_norm_order.h (a thread per partial, a warp's xor shuffles,
// then the warps' sums halved), then mean, 1/sqrt and the scaling with the CPU's float
// roundings. A last-bit difference here would reach every element of the row and, through the
// activation quantization of the next matrix product, the tokens.
#include "backend/rms_norm_order.h"

namespace cellm::cuda::norm {

constexpr int kThreads = backend::kRmsNormPartials;  // one partial sum per thread
constexpr int kWarps = kThreads / 32;

// 1 / sqrt(mean(xr[0 .. n)^2) + eps), to every thread of a block of kThreads threads.
__device__ __forceinline__ float inverse_rms(const float* xr, int n, float eps) {
  __shared__ double runs[kWarps];
  __shared__ float inv_s;
  double part = 0;
#pragma unroll 16  // the row's loads in flight together (a 4096-wide row is 16 per thread)
  for (int i = threadIdx.x; i < n; i += kThreads) part += static_cast<double>(xr[i]) * xr[i];
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
    const auto mean = static_cast<float>(r[0] / n);
    inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
  __syncthreads();
  return inv_s;
}

// One normalized element: (x * inv) * w, each product rounded.
__device__ __forceinline__ float scaled(float x, float inv, float w) { return __fmul_rn(__fmul_rn(x, inv), w); }

}  // namespace cellm::cuda::norm
