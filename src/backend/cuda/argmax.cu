// Index of the largest value of each logits row (the lowest index among equals). A thread has
// kBatch 16-byte loads in flight at a time: with one float per load and 512 threads the kernel
// was the slowest of a llama3-8b step after the attention (15.7 us for 128256 logits on the
// critical path, H200) although the row sits in L2, written by the product just before.
//
// The rows of a decode step (up to kArgmaxSplitMaxRows) are each split over parts of at least
// kPartCols columns, a block a part; the last block of a row to finish (an arrival counter per
// row, as attention.cu's split blocks count themselves) merges the parts' bests. One block of
// 1024 threads per row had read a row alone: llama3-8b's 128256 logits took 8.4 us of a batch-1
// step's critical path (H100, kernel trace), SmolLM2's 49152 4.6 us. Many rows fill the device
// as they are: there a block per row, as before.
#include <algorithm>
#include <climits>

#include <cuda/atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBatch = 8;  // float4 loads per thread in flight
constexpr int kPartThreads = 256;
constexpr int64_t kPartCols = 4096;  // a part's columns at least: four float4 loads per thread

struct Best {
  float value;
  int32_t index;
};

// Prefers the larger value, then the lower index. NaNs never win (as on the CPU). The order is
// total over the candidates, so parts and threads may be merged in any order.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

// The best of row[begin, end) seen by this thread (of `threads`): whole float4s where the row
// is 16-byte aligned (begin a multiple of 4), the rest one by one.
__device__ __forceinline__ Best scan(const float* row, int64_t begin, int64_t end, int threads) {
  Best best{-INFINITY, INT_MAX};
  const bool aligned = reinterpret_cast<uintptr_t>(row) % 16 == 0;
  const int64_t quads = aligned ? (end - begin) / 4 : 0;
  const auto* row4 = reinterpret_cast<const float4*>(row + begin);
  for (int64_t first = threadIdx.x; first < quads; first += int64_t{threads} * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t q = first + int64_t{u} * threads;
      v[u] = q < quads ? row4[q] : make_float4(NAN, NAN, NAN, NAN);  // past the end: never wins
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const auto at = static_cast<int32_t>(begin + 4 * min(first + int64_t{u} * threads, quads - 1));
      best = better(best, Best{v[u].x, at});
      best = better(best, Best{v[u].y, at + 1});
      best = better(best, Best{v[u].z, at + 2});
      best = better(best, Best{v[u].w, at + 3});
    }
  }
  for (int64_t i = begin + 4 * quads + threadIdx.x; i < end; i += threads)
    best = better(best, Best{row[i], static_cast<int32_t>(i)});
  return best;
}

__device__ __forceinline__ Best warp_best(Best best) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  return best;
}

// The block's best, in thread 0.
template <int kBlockThreads>
__device__ __forceinline__ Best block_best(Best best) {
  __shared__ Best warps[kBlockThreads / 32];
  best = warp_best(best);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kBlockThreads / 32; ++w) best = better(best, warps[w]);
  return best;
}

// Block (part, row): the part's best to bests[row][part]; the row's last block merges them.
__global__ void __launch_bounds__(kPartThreads) argmax_parts_kernel(const float* logits, size_t stride, int64_t cols,
                                                                    int64_t part_cols, ArgmaxWorkspace w,
                                                                    int32_t* out) {
  allow_next_kernel();
  wait_for_inputs();
  const int64_t r = blockIdx.y;
  const int part = static_cast<int>(blockIdx.x), parts = static_cast<int>(gridDim.x);
  const int64_t begin = part * part_cols;
  const Best mine = block_best<kPartThreads>(scan(logits + r * stride, begin, min(cols, begin + part_cols), kPartThreads));
  __shared__ bool last;
  int2* bests = reinterpret_cast<int2*>(w.bests) + r * kArgmaxMaxParts;
  if (threadIdx.x == 0) {
    __stcg(bests + part, make_int2(__float_as_int(mine.value), mine.index));
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> count(w.arrivals[r]);
    last = count.fetch_add(1u, ::cuda::memory_order_acq_rel) == static_cast<unsigned>(parts) - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  Best best{-INFINITY, INT_MAX};
  for (int p = static_cast<int>(threadIdx.x); p < parts; p += 32) {
    const int2 b = __ldcg(bests + p);  // from L2: other blocks wrote them
    best = better(best, Best{__int_as_float(b.x), b.y});
  }
  best = warp_best(best);
  if (threadIdx.x == 0) {
    out[r] = best.index == INT_MAX ? 0 : best.index;
    w.arrivals[r] = 0;  // ready for the next launch (graphs replay this one)
  }
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, size_t stride, int64_t cols,
                                                          int32_t* out) {
  allow_next_kernel();
  wait_for_inputs();
  const Best best = block_best<kThreads>(scan(logits + blockIdx.x * stride, 0, cols, kThreads));
  if (threadIdx.x == 0) out[blockIdx.x] = best.index == INT_MAX ? 0 : best.index;
}

}  // namespace

void launch_argmax_rows(const TensorRef& logits, int32_t* out, const ArgmaxWorkspace& workspace, cudaStream_t stream) {
  if (logits.dtype != DType::F32) fail(ErrorCode::Internal, "argmax_rows works on f32 logits");
  if (logits.rows == 0) return;
  const auto* data = static_cast<const float*>(logits.data);
  const size_t stride = logits.row_stride / sizeof(float);
  // Parts of whole float4s (a multiple of 4 columns), at most kArgmaxMaxParts of them.
  const int64_t part_cols = std::max(kPartCols, (logits.cols + 4 * kArgmaxMaxParts - 1) / (4 * kArgmaxMaxParts) * 4);
  const int64_t parts = (logits.cols + part_cols - 1) / part_cols;
  if (workspace.bests != nullptr && logits.rows <= kArgmaxSplitMaxRows && parts > 1) {
    launch_kernel("argmax kernel", argmax_parts_kernel, dim3(static_cast<unsigned>(parts), static_cast<unsigned>(logits.rows)),
                  kPartThreads, 0, stream, data, stride, logits.cols, part_cols, workspace, out);
    return;
  }
  launch_kernel("argmax kernel", argmax_kernel, static_cast<unsigned>(logits.rows), kThreads, 0, stream, data, stride,
                logits.cols, out);
}

}  // namespace cellm::cuda
