// The exact product of quantized weights with quantized activations (matmul_kernels.h states
// the contract), for up to kGemvTileTokens activation rows per block and any number of weight
// rows (matmul.cpp sends a single activation row to gemv_one_token.cu instead). Each warp walks its weight rows in steps of kBlocksPerStep blocks:
//  1. the step's bytes come to shared memory with 16-byte cp.async copies, kStages - 1 steps
//     ahead (a ring per warp), so many bytes are in flight without holding registers;
//  2. every block of the step is split over kLanes lanes (weight_units_int8.cuh), which compute
//     exact integer partial sums for each token and add them up with shuffles;
//  3. one lane per (block, token) writes the block's float operands (float(isum), d_w * d_a
//     and the min pair) to a slot; then the lanes that own an accumulator (one per token for
//     the k-quants, four per token for the 32-element formats: block b feeds b % 4) apply the
//     blocks' fused multiply-adds in block order.
// The float steps of an output are therefore the contract's sequence whatever the tiling, and
// a row's result does not depend on the other rows of the launch.
#include <algorithm>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/weight_units_int8.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using namespace exact;

struct GemvArgs {
  const uint8_t* w;
  size_t w_stride;  // bytes
  int64_t n;        // weight rows
  int blocks;       // per row
  QuantizedActivations act;
  int64_t tokens;  // activation rows
  float* out;
  size_t out_stride;  // floats
  ProductAddend addend;
  int64_t rows_per_warp;
};

template <class F>
struct Steps {
  static constexpr bool kKQuant = F::kElems == 256;
  static constexpr int kBlocksPerStep = 32 / F::kLanes;  // 16 or 8
  static constexpr int kBytes = kBlocksPerStep * F::kBlockBytes;  // whole 16-byte chunks
  static constexpr int kStages = kKQuant ? 3 : 4;
  static constexpr int kRingBytes = kBytes + 16;  // slack for the unaligned readers
  static_assert(kBytes % 16 == 0);
};

template <class F, int T>
__global__ void __launch_bounds__(kGemvThreads) gemv_quantized_kernel(GemvArgs a) {
  allow_next_kernel();
  wait_for_inputs();
  using S = Steps<F>;
  constexpr int kBps = S::kBlocksPerStep;
  __shared__ __align__(16) uint8_t ring[kGemvWarps][S::kStages][S::kRingBytes];
  __shared__ float4 slots[kGemvWarps][kBps][T];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first_row = (static_cast<int64_t>(blockIdx.y) * kGemvWarps + warp) * a.rows_per_warp;
  const int64_t end_row = min(a.n, first_row + a.rows_per_warp);
  if (first_row >= end_row) return;  // the whole warp
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * T;
  const int t_count = static_cast<int>(min(static_cast<int64_t>(T), a.tokens - t0));
  const int steps_per_row = (a.blocks + kBps - 1) / kBps;
  const int row_bytes = a.blocks * F::kBlockBytes;
  const int64_t iterations = (end_row - first_row) * steps_per_row;

  // Copies: iteration i's step into ring slot i % kStages.
  int64_t copy_iter = 0;
  int copy_step = 0, copy_slot = 0;
  const uint8_t* copy_row_start = a.w + static_cast<size_t>(first_row) * a.w_stride;
  auto issue_copy = [&] {
    if (copy_iter < iterations) {
      const uint8_t* src = copy_row_start + copy_step * S::kBytes;
      const int chunks = (min(S::kBytes, row_bytes - copy_step * S::kBytes) + 15) / 16;
      // A fixed trip count (the step's whole chunks over 32 lanes), predicated: a loop bound
      // known only at run time cost more instructions per step than the copies themselves.
#pragma unroll
      for (int k = 0; k < (S::kBytes / 16 + 31) / 32; ++k) {
        const int c = lane + 32 * k;
        if (c < chunks) cp_async16(&ring[warp][copy_slot][16 * c], src + 16 * c);
      }
      if (++copy_step == steps_per_row) copy_step = 0, copy_row_start += a.w_stride;
      copy_slot = copy_slot + 1 == S::kStages ? 0 : copy_slot + 1;
    }
    ++copy_iter;
    cp_async_commit();  // possibly empty: keeps one group per iteration
  };
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) issue_copy();

  const int local = lane / F::kLanes, part = lane % F::kLanes;
  // Each token's activation codes, scales and group sums, found once: rows past the tile's end
  // repeat its last row (computed, not stored).
  const int8_t* codes_of[T];
  const float* scales_of[T];
  const float* sums_of[T];
  const int16_t* groups_of[T];
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int64_t r = t0 + min(t, t_count - 1);
    codes_of[t] = a.act.codes + r * a.act.row_stride;
    scales_of[t] = a.act.scales + r * a.blocks;
    sums_of[t] = a.act.sums != nullptr ? a.act.sums + r * a.blocks : nullptr;
    groups_of[t] = a.act.group_sums != nullptr ? a.act.group_sums + r * (static_cast<int64_t>(a.blocks) * 16) : nullptr;
  }

  float acc = 0.0f;
  int64_t row = first_row;
  int step = 0, slot = 0;
  for (int64_t it = 0; it < iterations; ++it) {
    issue_copy();
    cp_async_wait<S::kStages - 1>();
    __syncwarp();
    const uint8_t* block = &ring[warp][slot][local * F::kBlockBytes];
    const int b = step * kBps + local;
    const bool live = b < a.blocks;
    int isum[T], msum[T];
    typename F::Lane l;
    if (live) {
      F::lane(block, part, l);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const int8_t* codes = codes_of[t] + b * F::kElems;
        if constexpr (S::kKQuant) {
          isum[t] = F::partial(l, part, codes, groups_of[t] + 16 * b, msum[t]);
        } else {
          isum[t] = F::partial(l, part, codes);
        }
      }
    } else {
#pragma unroll
      for (int t = 0; t < T; ++t) isum[t] = msum[t] = 0;
    }
#pragma unroll
    for (int m = 1; m < F::kLanes; m <<= 1) {
#pragma unroll
      for (int t = 0; t < T; ++t) {
        isum[t] += __shfl_xor_sync(0xffffffffu, isum[t], m);
        if constexpr (S::kKQuant && F::kHasMin) msum[t] += __shfl_xor_sync(0xffffffffu, msum[t], m);
      }
    }
    if (live) {
      const float dw = F::d(block);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        if (t % F::kLanes != part) continue;
        const float da = __ldg(scales_of[t] + b);  // this block's activation scale
        float4 s;
        if constexpr (S::kKQuant) {
          s = make_float4(__int2float_rn(isum[t]), __fmul_rn(dw, da), __int2float_rn(msum[t]),
                          __fmul_rn(F::dmin(block), -da));
        } else {
          s = make_float4(small_int_to_float(isum[t]), __fmul_rn(dw, da), F::m(block),
                          F::kHasMin ? __ldg(sums_of[t] + b) : 0.0f);
        }
        slots[warp][local][t] = s;
      }
    }
    __syncwarp();
    // The accumulators: k-quants one per token (lane t), 32-element formats four per token
    // (lane 4t + k takes blocks k, k + 4, ... of the step).
    constexpr int kAccumulators = S::kKQuant ? 1 : 4;
    const int t = lane / kAccumulators, k = lane % kAccumulators;
    if (t < T) {
#pragma unroll
      for (int j = k; j < kBps; j += kAccumulators) {
        if (step * kBps + j < a.blocks) {
          const float4 s = slots[warp][j][t];
          acc = __fmaf_rn(s.x, s.y, acc);
          if constexpr (F::kHasMin) acc = __fmaf_rn(s.z, s.w, acc);
        }
      }
    }
    if (step == steps_per_row - 1) {
      float v = acc;
      if constexpr (kAccumulators == 4) {
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));  // acc0 + acc1, acc2 + acc3
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));  // (acc0 + acc1) + (acc2 + acc3)
      }
      if (k == 0 && t < t_count) {
        a.out[static_cast<size_t>(t0 + t) * a.out_stride + row] = a.addend.added(v, t0 + t, row);
      }
      acc = 0.0f;
      step = 0;
      ++row;
    } else {
      ++step;
    }
    slot = slot + 1 == S::kStages ? 0 : slot + 1;
    __syncwarp();  // the slots and this ring slot are rewritten next
  }
  cp_async_wait<0>();
}

template <class F, int T>
void launch_tiles(const GemvArgs& base, int sm_count, cudaStream_t stream) {
  static const int blocks_per_sm = gemv_blocks_per_sm(gemv_quantized_kernel<F, T>);
  const GemvGrid g = gemv_grid(blocks_per_sm, base.n, base.tokens, T, sm_count);
  GemvArgs args = base;
  args.rows_per_warp = g.units_per_warp;
  launch_kernel("exact gemv kernel", gemv_quantized_kernel<F, T>, g.grid, kGemvThreads, 0, stream, args);
}

}  // namespace

void launch_gemv_quantized(const QuantizedActivations& q, int64_t tokens, const TensorRef& w,
                           const ProductAddend& addend, const TensorRef& out, int sm_count, cudaStream_t stream) {
  if (tokens == 0 || w.rows == 0) return;
  GemvArgs args{static_cast<const uint8_t*>(w.data),
                w.row_stride,
                w.rows,
                0,
                q,
                tokens,
                static_cast<float*>(out.data),
                out.row_stride / sizeof(float),
                addend,
                1};
  const bool known = visit_exact_format(w.dtype, [&]<class F>(F) {
    args.blocks = static_cast<int>(w.cols / F::kElems);
    if (tokens == 1)
      launch_tiles<F, 1>(args, sm_count, stream);
    else if (tokens == 2)
      launch_tiles<F, 2>(args, sm_count, stream);
    else if (tokens <= 4)
      launch_tiles<F, 4>(args, sm_count, stream);
    else
      launch_tiles<F, kGemvTileTokens>(args, sm_count, stream);
  });
  if (!known) fail(ErrorCode::Internal, "exact gemv: no kernel for ", dtype_name(w.dtype));
}

}  // namespace cellm::cuda
