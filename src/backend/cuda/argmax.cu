// Index of the largest value of each logits row (the lowest index among equals), one block
// per row: each thread scans a strided slice, then the block merges the candidates. A thread
// has kBatch 16-byte loads in flight at a time: with one float per load and 512 threads the
// kernel was the slowest of a llama3-8b step after the attention (15.7 us for 128256 logits on
// the critical path, H200) although the row sits in L2, written by the product just before.
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBatch = 8;  // float4 loads per thread in flight

struct Best {
  float value;
  int32_t index;
};

// Prefers the larger value, then the lower index. NaNs never win (as on the CPU).
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, size_t stride, int64_t cols,
                                                          int32_t* out) {
  allow_next_kernel();
  wait_for_inputs();
  __shared__ Best warp_best[kThreads / 32];
  const float* row = logits + blockIdx.x * stride;
  Best best{-INFINITY, INT_MAX};
  // Whole float4s where the row is 16-byte aligned, then the rest one by one.
  const int64_t quads = reinterpret_cast<uintptr_t>(row) % 16 == 0 ? cols / 4 : 0;
  const auto* row4 = reinterpret_cast<const float4*>(row);
  for (int64_t first = threadIdx.x; first < quads; first += int64_t{kThreads} * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t q = first + int64_t{u} * kThreads;
      v[u] = q < quads ? row4[q] : make_float4(NAN, NAN, NAN, NAN);  // past the end: never wins
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const auto at = static_cast<int32_t>(4 * min(first + int64_t{u} * kThreads, quads - 1));
      best = better(best, Best{v[u].x, at});
      best = better(best, Best{v[u].y, at + 1});
      best = better(best, Best{v[u].z, at + 2});
      best = better(best, Best{v[u].w, at + 3});
    }
  }
  for (int64_t i = 4 * quads + threadIdx.x; i < cols; i += kThreads) best = better(best, Best{row[i], static_cast<int32_t>(i)});
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best b = warp_best[0];
    for (int w = 1; w < kThreads / 32; ++w) b = better(b, warp_best[w]);
    out[blockIdx.x] = b.index == INT_MAX ? 0 : b.index;
  }
}

}  // namespace

void launch_argmax_rows(const TensorRef& logits, int32_t* out, cudaStream_t stream) {
  if (logits.dtype != DType::F32) fail(ErrorCode::Internal, "argmax_rows works on f32 logits");
  if (logits.rows == 0) return;
  launch_kernel("argmax kernel", argmax_kernel, static_cast<unsigned>(logits.rows), kThreads, 0, stream,
                static_cast<const float*>(logits.data), logits.row_stride / sizeof(float), logits.cols, out);
}

}  // namespace cellm::cuda
