// The exact product of quantized weights with ONE activation row (a decode step of one
// sequence), where the whole cost is streaming the weights once. gemv.cu splits each block over
// 2 or 4 lanes and reduces with shuffles: ~590 warp instructions per 1152 weight bytes (ncu,
// Q4_K), which caps it near 1 TB/s on an H200. Here a lane computes whole blocks
// (block_terms.cuh) and every load stays coalesced:
//  - a block of kWarps warps takes kRows rows at a time (a "group"), in rounds: in each round
//    warp w does pass kWarps * round + w, which is blocks p * kSpan .. p * kSpan + kSpan - 1
//    of each row; lane (j, r) = (lane / kRows, lane % kRows) does row r's blocks
//    p * kSpan + u * kLanesPerRow + j, u < kUnits. Small matrices so still fill the device
//    (llama3-8b's 4096 x 4096 is 512 groups), large ones loop over groups;
//  - a pass's kRows row segments are copied to shared memory with 16-byte cp.async, one item
//    ahead (two stages per warp), as contiguous chunks: a warp's load instruction reads whole
//    lines. The activations stay in global memory (L1-resident); the lanes of one j read the
//    same address;
//  - every lane writes its blocks' float operands to shared memory; after the round's barrier,
//    warp 0 folds them in block order: the k-quants one chain per row, the 32-element formats
//    four (block b to chain b % 4, lane (b % 4, r)), closed by (acc0 + acc1) + (acc2 + acc3).
//    That is the contract's sequence (matmul_kernels.h): the CPU's bits, and gemv.cu's.
#include <algorithm>

#include "backend/cuda/block_terms.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using exact::one_lane::TokenActivations;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kLanesPerRow = 4;  // the 32-element formats' four chains live in four lanes
constexpr int kRows = 32 / kLanesPerRow;

template <class F>
struct Staging {
  static constexpr bool kKQuant = F::kElems == 256;
  static constexpr int kUnits = kKQuant ? 1 : 4;  // blocks per lane per pass
  static constexpr int kSpan = kLanesPerRow * kUnits;  // blocks of a row per pass
  // A row segment: its blocks from their offset modulo 16, in whole 16-byte chunks; an odd
  // count of chunks between segments keeps eight rows' 16-byte reads on different banks.
  static constexpr int kChunks = (15 + kSpan * F::kBlockBytes + 15) / 16;
  static constexpr int kSegmentBytes = 16 * (kChunks | 1);
  static constexpr int kStageBytes = kRows * kSegmentBytes + 16;  // slack for the word readers
  // A round: each warp one pass of the same rows; its operands per row, an odd count apart.
  static constexpr int kRoundStride = (kWarps * kSpan) | 1;
  static constexpr int kSharedBytes = 2 * kWarps * kStageBytes + 2 * kRows * kRoundStride * 16;
};

struct OneTokenArgs {
  const uint8_t* w;
  size_t w_stride;     // bytes
  size_t row_chunks;   // 16-byte chunks of a row that may be read (row bytes rounded up)
  int64_t n;           // weight rows
  int blocks;          // per row
  TokenActivations act;
  float* out;
  const float* bias;
};

template <class F>
__global__ void __launch_bounds__(kThreads) gemv_one_token_kernel(OneTokenArgs a) {
  using S = Staging<F>;
  extern __shared__ __align__(16) uint8_t shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j = lane / kRows, r = lane % kRows;
  uint8_t* stages = shared + warp * 2 * S::kStageBytes;
  float4* operands = reinterpret_cast<float4*>(shared + kWarps * 2 * S::kStageBytes);  // [2][kRows][kRoundStride]
  const int passes = (a.blocks + S::kSpan - 1) / S::kSpan;
  const int rounds = (passes + kWarps - 1) / kWarps;
  const int64_t groups = (a.n + kRows - 1) / kRows;
  const int64_t items = (groups - blockIdx.x + gridDim.x - 1) / gridDim.x * rounds;  // this block's (group, round)s

  // Item i: group blockIdx.x + (i / rounds) * gridDim.x, round i % rounds; this warp's pass of
  // it is kWarps * round + warp. Its segments go to stage i % 2: chunk c of the warp's copy is
  // chunk c % kChunks of row c / kChunks, from the segment's first block rounded down to 16 bytes.
  auto issue_copy = [&](int64_t i) {
    const int64_t g = blockIdx.x + (i / rounds) * gridDim.x;
    const int p = static_cast<int>(i % rounds) * kWarps + warp;
    if (i < items && p < passes) {
      uint8_t* stage = stages + (i & 1) * S::kStageBytes;
      const int64_t row0 = g * kRows;
      const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), a.n - row0));
      const size_t first_chunk = static_cast<size_t>(p) * S::kSpan * F::kBlockBytes / 16;
#pragma unroll
      for (int k = 0; k < (kRows * S::kChunks + 31) / 32; ++k) {
        const int c = lane + 32 * k;
        const int rr = c / S::kChunks, chunk = c % S::kChunks;
        if (c < kRows * S::kChunks && rr < rows && first_chunk + chunk < a.row_chunks)
          exact::cp_async16(stage + rr * S::kSegmentBytes + 16 * chunk,
                            a.w + static_cast<size_t>(row0 + rr) * a.w_stride + 16 * (first_chunk + chunk));
      }
    }
    exact::cp_async_commit();  // possibly empty: one group per item
  };
  issue_copy(0);

  float acc = 0.0f;  // warp 0: the fold's accumulator of row lane % kRows (chain lane / kRows)
  for (int64_t i = 0; i < items; ++i) {
    const int64_t g = blockIdx.x + (i / rounds) * gridDim.x;
    const int round = static_cast<int>(i % rounds);
    const int p = round * kWarps + warp;
    const int64_t row0 = g * kRows;
    const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), a.n - row0));
    float4* ops = operands + (i & 1) * kRows * S::kRoundStride;
    issue_copy(i + 1);
    exact::cp_async_wait<1>();
    __syncwarp();
    if (p < passes && r < rows) {
      const uint8_t* segment = stages + (i & 1) * S::kStageBytes + r * S::kSegmentBytes +
                               (static_cast<size_t>(p) * S::kSpan * F::kBlockBytes) % 16;
#pragma unroll
      for (int u = 0; u < S::kUnits; ++u) {
        const int within = u * kLanesPerRow + j;  // block of the segment
        const int b = p * S::kSpan + within;
        if (b < a.blocks) ops[r * S::kRoundStride + warp * S::kSpan + within] = F::terms(segment + within * F::kBlockBytes, a.act, b);
      }
    }
    __syncthreads();  // the round's operands are complete; the other buffer is free again
    if (warp == 0) {
      // The round's blocks in order: k-quants one chain per row (lanes 0..7); the 32-element
      // formats four, block b to chain b % 4 = lane / kRows.
      const int first_block = round * kWarps * S::kSpan;
      if (S::kKQuant ? j == 0 : true) {
        for (int s = S::kKQuant ? 0 : j; s < kWarps * S::kSpan && first_block + s < a.blocks;
             s += S::kKQuant ? 1 : kLanesPerRow) {
          const float4 t = ops[r * S::kRoundStride + s];
          acc = __fmaf_rn(t.x, t.y, acc);
          if constexpr (F::kHasMin) acc = __fmaf_rn(t.z, t.w, acc);
        }
      }
      if (round == rounds - 1) {
        float v = acc;
        if constexpr (!S::kKQuant) {  // (acc0 + acc1) + (acc2 + acc3)
          const float a1 = __shfl_sync(0xffffffffu, acc, kRows + r);
          const float a2 = __shfl_sync(0xffffffffu, acc, 2 * kRows + r);
          const float a3 = __shfl_sync(0xffffffffu, acc, 3 * kRows + r);
          v = __fadd_rn(__fadd_rn(acc, a1), __fadd_rn(a2, a3));
        }
        if (j == 0 && r < rows) {
          if (a.bias != nullptr) v = __fadd_rn(v, a.bias[row0 + r]);
          a.out[row0 + r] = v;
        }
        acc = 0.0f;
      }
    }
    __syncwarp();  // this warp's stage is refilled by the copy issued next item
  }
  exact::cp_async_wait<0>();
}

template <class F>
void launch(const OneTokenArgs& a, int sm_count, cudaStream_t stream) {
  const auto kernel = gemv_one_token_kernel<F>;
  constexpr int kShared = Staging<F>::kSharedBytes;
  static const int blocks_per_sm = [&] {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared),
          "one-token gemv shared memory");
    int blocks = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, kShared), "one-token gemv occupancy");
    return std::max(blocks, 1);
  }();
  const int64_t groups = (a.n + kRows - 1) / kRows;
  const int64_t grid = std::min<int64_t>(groups, int64_t{sm_count} * blocks_per_sm);
  kernel<<<static_cast<unsigned>(grid), kThreads, kShared, stream>>>(a);
}

}  // namespace

bool gemv_one_token_supported(const TensorRef& w) { return exact::one_lane::visit_block_terms(w.dtype, [](auto) {}); }

void launch_gemv_one_token(const QuantizedActivations& q, const TensorRef& w, const float* bias, const TensorRef& out,
                           int sm_count, cudaStream_t stream) {
  if (w.rows == 0) return;
  OneTokenArgs args{};
  args.w = static_cast<const uint8_t*>(w.data);
  args.w_stride = w.row_stride;
  args.row_chunks = (row_bytes(w.dtype, w.cols) + 15) / 16;
  args.n = w.rows;
  args.act = {q.codes, q.scales, q.sums, q.group_sums};
  args.out = static_cast<float*>(out.data);
  args.bias = bias;
  const bool known = exact::one_lane::visit_block_terms(w.dtype, [&]<class F>(F) {
    args.blocks = static_cast<int>(w.cols / F::kElems);
    launch<F>(args, sm_count, stream);
  });
  if (!known) fail(ErrorCode::Internal, "one-token gemv: no kernel for ", dtype_name(w.dtype));
  check_launch("one-token gemv kernel");
}

}  // namespace cellm::cuda
