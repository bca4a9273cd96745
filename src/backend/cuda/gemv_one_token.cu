// The exact product of quantized weights with ONE activation row (a decode step of one
// sequence; a few rows share the weights, below), where the whole cost is streaming the weights
// once. gemv.cu splits each block over 2 or 4 lanes and reduces with shuffles: ~590 warp
// instructions per 1152 weight bytes (ncu, Q4_K), which caps it near 1 TB/s on an H200. Here a
// lane computes whole blocks (block_terms.cuh) and every load stays coalesced:
//  - a block of kWarps warps takes kRows rows at a time (a "group"), in rounds: in each round
//    warp w does pass kWarps * round + w, which is blocks p * kSpan .. p * kSpan + kSpan - 1
//    of each row; lane (j, r) = (lane / kRows, lane % kRows) does row r's blocks
//    p * kSpan + u * kLanesPerRow + j, u < kUnits. Small matrices so still fill the device
//    (llama3-8b's 4096 x 4096 is 512 groups), large ones loop over groups. Rows of at most
//    kWarps / 2 passes leave warps without a pass: there a block takes kWarps / passes groups at
//    a time (groups_per_item), warp w pass w % passes of group w / passes;
//  - a pass's kRows row segments are copied to shared memory kStages - 1 items ahead (kStages
//    stages per warp): on Hopper one bulk copy per row segment, row rr's issued by lane rr and
//    counted on the stage's mbarrier (16-byte cp.async by every lane cost ~100 instructions of
//    addressing per lane and item; lane 0 issuing all eight, unrolled, ran slower);
//    elsewhere 16-byte cp.async of whole lines. The quantized activations come from global
//    memory (L1-resident) or, for a row the kernel quantizes itself (kQuantizes: a prologue
//    while the first weights are on their way), from shared memory; the lanes of one j read
//    the same address. A lane asks for its blocks' activations before it waits for the
//    weights (block_terms.cuh);
//  - every lane writes its blocks' float operands to shared memory; after the round's barrier,
//    warp 0 folds them in block order: the k-quants one chain per row, the 32-element formats
//    four (block b to chain b % 4, lane (b % 4, r)), closed by (acc0 + acc1) + (acc2 + acc3).
//    That is the contract's sequence (matmul_kernels.h): the CPU's bits, and gemv.cu's.
// A few activation rows (a decode step of a few sequences: gemv_one_token_max_rows) share the
// staged weights: a lane forms its blocks' terms for each row in turn from the same segment,
// and warp w folds rows w, w + kWarps, ... The weights are streamed once for all of them.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/block_terms.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/quantize_rules.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using exact::one_lane::TokenActivations;

// Warps per block. 8 (two blocks per SM, half the rounds for a long row) ran slower on every
// llama3-8b Q4_K shape (H200, CudaPerf.GemvModelShapes in graphs, one run, stop 30): o 1901 ->
// 1562 GB/s, gate+up 3402 -> 2958, output 3892 -> 3402, down 2507 -> 2431/2521.
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Weight stages per warp. More stages mean fewer blocks per SM (shared memory): measured on
// llama3-8b Q4_K batch 1, 3 and 4 stages ran slower than 2 (386.9 -> 370.3 and 364.9 tok/s).
// Measured again at stop 30 (H200, CudaPerf.GemvModelShapes in graphs, one run): 3 stages took
// Q4_K's o from 1886 to 1605 GB/s and down from 2499 to 2084; two k-quant blocks per lane and
// pass (Staging::kUnits 2) took gate+up from 3392 to 2685 and the output matrix from 3890 to
// 3022.
// Filling both stages before the wait instead of one (llama3-8b b1, one run, per layer): the
// down projection 11.2 -> 9.4 us, but the bandwidth it took in the tail of gate+up made that one
// 18.4 -> 20.1 us (done only after the GLU), and after the norm the norm slowed more than the
// product gained (3.1 -> 4.6 us): the kernel ahead is on the critical path and its loads queue
// behind the weight copies.
constexpr int kStages = 2;
constexpr int kLanesPerRow = 4;  // the 32-element formats' four chains live in four lanes
constexpr int kRows = 32 / kLanesPerRow;

template <class F, int kTokens>
struct Staging {
  static constexpr bool kKQuant = F::kElems == 256;
  static constexpr int kUnits = kKQuant ? 1 : 4;  // blocks per lane per pass
  static constexpr int kSpan = kLanesPerRow * kUnits;  // blocks of a row per pass
  // A row segment: its blocks from their offset modulo 16, in whole 16-byte chunks; an odd
  // count of chunks between segments keeps eight rows' 16-byte reads on different banks.
  static constexpr int kChunks = (15 + kSpan * F::kBlockBytes + 15) / 16;
  static constexpr int kSegmentBytes = 16 * (kChunks | 1);
  static constexpr int kStageBytes = kRows * kSegmentBytes + 16;  // slack for the word readers
  // A round: each warp one pass of the same rows; its operands per token and row, an odd count
  // apart.
  static constexpr int kRoundStride = (kWarps * kSpan) | 1;
  static constexpr int kTokenStride = kRows * kRoundStride;
  // One token's operands are kept for two rounds, so a round's are written while the last
  // round's are folded; several tokens' take one buffer, written only after the fold (a
  // barrier more a round), which keeps Q4_1's eight at two blocks per SM instead of one.
  static constexpr int kBuffers = kTokens == 1 ? 2 : 1;
  // Shared memory: each warp's stage barriers, its stages, the operand buffers, then
  // (kQuantizes) the quantized activation row.
  static constexpr int kStagesOffset = (kStages * kWarps * 8 + 15) / 16 * 16;
  static constexpr int kOperandsOffset = kStagesOffset + kStages * kWarps * kStageBytes;
  static constexpr int kSharedBytes = kOperandsOffset + kBuffers * kTokens * kTokenStride * 16;
};

// Groups of kRows rows an item takes: one, or - for one token, rows of at most kWarps / 2
// passes, and enough groups that every resident block still has a set of them - kWarps / passes
// of them, each warp a pass of one, so that no warp idles and a block has that many more weights
// in flight. A row of two passes (SmolLM2's 576 columns of a 32-element format: 18 blocks, a pass
// of 16 and one of 2) had kept warps 2 and 3 idle and a block's copies to two warps' segments.
// H100, CudaPerf.GemvShortRows in graphs, one run, one group / two a set: SmolLM2's output matrix
// (49152 x 576 Q8_0) 19.2 -> 14.0 us, Gemma 3 270M's (262144 x 640 Q8_0, 178 MB) 88.8 -> 67.8 us.
// Small matrices keep one group a set: a trial that gave them sets too halved their grids and ran
// slower (another run: SmolLM2's 960 x 576 Q4_1 q/k/v 2.9 -> 3.1 us, its batch-1 step 1550 ->
// 1484 tok/s).
int groups_per_item(int passes, int tokens, int64_t groups, int64_t resident_blocks) {
  const int per_item = tokens == 1 && 2 * passes <= kWarps ? kWarps / passes : 1;
  return groups >= per_item * resident_blocks ? per_item : 1;
}

struct OneTokenArgs {
  const uint8_t* w;
  size_t w_stride;     // bytes
  size_t row_chunks;   // 16-byte chunks of a row that may be read (row bytes rounded up)
  int64_t n;           // weight rows
  int blocks;          // per row
  int64_t k;           // columns
  const float* x;      // the activation row (16-byte aligned)
  TokenActivations act;  // x quantized already (token 0's), or unused: the kernel quantizes x itself
  int tokens;            // activation rows, at most the kernel's kTokens
  int per_item;          // groups of kRows rows a block takes at a time (groups_per_item)
  int64_t codes_stride;  // bytes from one token's codes to the next's (QuantizedActivations::row_stride)
  float* out;
  size_t out_stride;  // floats from one token's outputs to the next's
  ProductAddend addend;  // a bias per weight row, or a residual per output
};

// Token t's quantized activations (matmul_kernels.h's layout: per row, the codes row_stride
// apart, the scales and sums `blocks` apart, the group sums 16 * blocks).
__device__ __forceinline__ TokenActivations token_activations(const OneTokenArgs& a, int t) {
  const int64_t b = a.blocks;
  return {a.act.codes + t * a.codes_stride, a.act.scales + t * b, a.act.sums != nullptr ? a.act.sums + t * b : nullptr,
          a.act.group_sums != nullptr ? a.act.group_sums + t * b * 16 : nullptr};
}

// The quantized row in shared memory: codes, then the block scales, then Q8_1's sums or Q8_K's
// group sums.
__host__ __device__ constexpr size_t activation_bytes(int64_t k) {
  return static_cast<size_t>(k) + static_cast<size_t>(k / 32) * 4 * 2;  // >= k / 16 * 2 group sums
}

// Measured and set aside (stop 32): each block normalizing the row too (RMSNorm's factor, then
// the normed row quantized here), the norm's kernel gone. H200, one run, b1 step: llama3-8b
// 1942.0 -> 2219.2 us (q/k/v with its norm 8.22 -> 12.93 us a layer, gate+up with its norm 21.55
// -> 25.28), SmolLM2's shape 650.8 -> 757.9: every block's weights wait for its prologue, where
// the norm's kernel does that work once while the product's first weights arrive.
//
// Quantizes a.x into shared memory by the rules of quantize_rules.cuh (the bytes
// launch_quantize_activations writes) and returns the view the block terms read. Every load of
// a batch is issued before the first block is quantized: the prologue then costs one trip to L2
// per batch, about what the first weights take to arrive (their copy is already on its way).
template <class F>
__device__ TokenActivations quantize_row(const OneTokenArgs& a, uint8_t* base) {
  TokenActivations act{};
  auto* codes = reinterpret_cast<int8_t*>(base);
  auto* scales = reinterpret_cast<float*>(base + a.k);
  auto* extra = reinterpret_cast<float*>(base + a.k + a.k / 32 * 4);
  act.codes = codes, act.scales = scales;
  // The row as one row of matmul_kernels.h's layout, so the standalone kernels' stores apply.
  QuantizedActivations row{codes, scales, extra, reinterpret_cast<int16_t*>(extra), 0};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if constexpr (F::kActivations == ActivationFormat::Q8_K) {
    constexpr int kBatch = 4;  // blocks per warp
    auto* groups = reinterpret_cast<int16_t*>(extra);
    act.group_sums = groups;
    const int blocks = static_cast<int>(a.k / 256);
    for (int b0 = warp; b0 < blocks; b0 += kWarps * kBatch) {
      float v[kBatch][8];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int b = min(b0 + kWarps * i, blocks - 1);
        const float4 lo = *reinterpret_cast<const float4*>(a.x + 256 * b + 8 * lane);
        const float4 hi = *reinterpret_cast<const float4*>(a.x + 256 * b + 8 * lane + 4);
        v[i][0] = lo.x, v[i][1] = lo.y, v[i][2] = lo.z, v[i][3] = lo.w;
        v[i][4] = hi.x, v[i][5] = hi.y, v[i][6] = hi.z, v[i][7] = hi.w;
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int b = b0 + kWarps * i;
        if (b >= blocks) break;  // warp-uniform
        quantize::store_q8_k(quantize::quantize_q8_k(v[i], lane), row, 0, b, blocks, lane);
      }
    }
  } else {
    constexpr int kBatch = 8;                 // block rounds per load batch
    constexpr int kPerRound = kThreads / 8;  // eight lanes per block
    act.sums = extra;
    const int blocks = static_cast<int>(a.k / 32), part = threadIdx.x % 8;
    for (int first = 0; first < blocks; first += kPerRound * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int b = min(first + kPerRound * i + static_cast<int>(threadIdx.x) / 8, blocks - 1);
        v[i] = *reinterpret_cast<const float4*>(a.x + 32 * b + 4 * part);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        if (first + kPerRound * i >= blocks) break;  // block-uniform: every lane takes part below
        const int wanted = first + kPerRound * i + static_cast<int>(threadIdx.x) / 8;
        const quantize::Q8Block32 r = quantize::quantize_q8_32(v[i]);  // past the end: the last block, unstored
        if (wanted < blocks)
          quantize::store_q8_32<F::kActivations == ActivationFormat::Q8_1>(r, row, 0, wanted, blocks, part);
      }
    }
  }
  __syncthreads();
  return act;
}

// Held to 112 registers (Q6_K to 128), so that its four blocks per SM (shared memory allows no
// more) leave room for a 256-thread block of the kernel after it (the norm, the GLU), which
// then starts early and is ready when the product ends. Registers are allocated in steps of 8:
// Q4_K took 111 (112 allocated); variants of this kernel at 114 and 123 lost that room
// (llama3-8b b1, H200, one run each: glu_quantize 93.3 -> 123.2 and 92.9 -> 120.7 us a step;
// held to 112, 94.0). The cap binds Q5_K (126 -> 112, no spill); under it ptxas lays the others
// out anew (Q4_K 111 -> 107, Q4_1 78 -> 80 registers), and SmolLM2's Q4_1 products ran faster:
// 220.3 -> 214.0 us a step, step 659.4 -> 650.3 (llama3-8b 1939.2 -> 1943.2, within noise).
// Held to five blocks per SM (96 registers) it ran slower, step 1936 -> 2063 us: five blocks
// fill the SM's registers.
// Several tokens (held to 128 registers, four blocks per SM then fill the SM's registers) keep
// each token's accumulators and the token loop's addresses; held to 112, the k-quants spilled
// (Q5_K 72-96 bytes, Q4_K 8-16). Q6_K still spills 64 / 100 bytes at 4 / 8 tokens, and still
// beats gemv.cu there.
// The 32-element formats, one token, are held to 80, what they had taken until the groups of a
// set (groups_per_item) took Q4_1 to 88 and SmolLM2's small products, whose next kernel starts
// in the room they leave, ran ~0.2 us slower a call (H100, CudaPerf.GemvShortRows: 3072 x 576
// 3.1 -> 3.3 us in graphs). Under 80 none spills (ptxas).
template <class F, int kTokens>
constexpr int kHeldRegisters = kTokens > 1 || std::is_same_v<F, exact::one_lane::Q6KTerms> ? 128
                               : F::kElems == 32                                          ? 80
                                                                                           : 112;

// kTokens activation rows (a.tokens of them) share each staged weight segment: their terms are
// formed one token after another from it, and warp w folds tokens w, w + kWarps, ... (warp 0
// alone with one token), each (token, row) in the contract's sequence: a row's output is the
// same bits whichever launch and token count computed it.
template <class F, bool kQuantizes, int kTokens>
__global__ void __launch_bounds__(kThreads) __maxnreg__((kHeldRegisters<F, kTokens>)) gemv_one_token_kernel(OneTokenArgs a) {
  static_assert(!kQuantizes || kTokens == 1, "the kernel quantizes a single row only");
  allow_next_kernel();
  using S = Staging<F, kTokens>;
  // The tokens warp `warp` folds: kFolded of them, kWarps apart.
  constexpr int kFolded = (kTokens + kWarps - 1) / kWarps;
  extern __shared__ __align__(16) uint8_t shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j = lane / kRows, r = lane % kRows;
  uint8_t* stages = shared + S::kStagesOffset + warp * kStages * S::kStageBytes;
  float4* operands = reinterpret_cast<float4*>(shared + S::kOperandsOffset);  // [kBuffers][kTokens][kRows][kRoundStride]
  const int passes = (a.blocks + S::kSpan - 1) / S::kSpan;
  const int rounds = (passes + kWarps - 1) / kWarps;
  const int per_item = kTokens == 1 ? a.per_item : 1;  // rounds is 1 where it is more than one
  const int groups = static_cast<int>((a.n + kRows - 1) / kRows);
  const int sets = (groups + per_item - 1) / per_item;  // of per_item groups
  const int items = (sets - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                    static_cast<int>(gridDim.x) * rounds;  // this block's (set, round)s

  // Item i: set blockIdx.x + (i / rounds) * gridDim.x, round i % rounds. This warp's pass of it
  // is kWarps * round + warp (one group a set), or warp % passes of the set's group warp / passes.
  // Group g of the set is folded by warp g (one token; otherwise warp 0 folds the set's group).
  struct Item {
    int round, pass;
    int64_t set;
    int64_t row0;  // the first row of the group this warp copies and computes
    int rows;      // of that group (fewer than kRows only at the end; none past it)
  };
  const auto group_rows = [&](int64_t row0) {
    return static_cast<int>(max(int64_t{0}, min(static_cast<int64_t>(kRows), a.n - row0)));
  };
  const int set_pass = per_item > 1 ? warp % passes : warp;   // this warp's pass of an item
  const int set_group = per_item > 1 ? warp / passes : 0;      // and its group of the set
  auto item_at = [&](int i) {
    Item it;
    it.round = i % rounds;
    it.set = static_cast<int64_t>(blockIdx.x) + static_cast<int64_t>(i / rounds) * gridDim.x;
    it.pass = it.round * kWarps + set_pass;  // rounds is 1 where a set has several groups
    it.row0 = (it.set * per_item + set_group) * kRows;
    it.rows = group_rows(it.row0);
    return it;
  };
  // Item i's segments go to stage i % kStages: row rr's kChunks 16-byte chunks from the segment's
  // first block rounded down to 16 bytes (fewer at the row's end) to stage + rr * kSegmentBytes.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // One bulk copy per row, issued by lane rr, counted on the stage's barrier; lane 0 arrives
  // once per item (with no bytes for an item without a pass), so item i completes phase
  // i / kStages of its stage's barrier.
  auto* barriers = reinterpret_cast<uint64_t*>(shared) + kStages * warp;
  if (lane == 0) {
    for (int st = 0; st < kStages; ++st) exact::mbarrier_init(barriers + st);
    exact::mbarrier_init_fence();
  }
  __syncwarp();
  auto issue_copy = [&](int i) {
    const Item it = item_at(i);
    const bool copies = i < items && it.pass < passes;
    const size_t first_chunk = static_cast<size_t>(it.pass) * S::kSpan * F::kBlockBytes / 16;
    const size_t chunks = copies ? min(static_cast<size_t>(S::kChunks), a.row_chunks - first_chunk) : 0;
    const unsigned bytes = 16u * static_cast<unsigned>(chunks);
    if (lane == 0) exact::mbarrier_arrive_expect(barriers + i % kStages, bytes * static_cast<unsigned>(it.rows));
    __syncwarp();
    if (copies && lane < it.rows) {
      exact::fence_before_bulk_copy();
      exact::bulk_copy(stages + i % kStages * S::kStageBytes + lane * S::kSegmentBytes,
                       a.w + static_cast<size_t>(it.row0 + lane) * a.w_stride + 16 * first_chunk, bytes,
                       barriers + i % kStages);
    }
  };
  auto wait_copy = [&](int i) { exact::mbarrier_wait(barriers + i % kStages, (i / kStages) & 1); };
#else
  // 16-byte asynchronous copies by every lane, one commit group per item.
  auto issue_copy = [&](int i) {
    const Item it = item_at(i);
    const int p = it.pass, rows = it.rows;
    if (i < items && p < passes) {
      uint8_t* stage = stages + i % kStages * S::kStageBytes;
      const size_t first_chunk = static_cast<size_t>(p) * S::kSpan * F::kBlockBytes / 16;
#pragma unroll
      for (int k = 0; k < (kRows * S::kChunks + 31) / 32; ++k) {
        const int c = lane + 32 * k;
        const int rr = c / S::kChunks, chunk = c % S::kChunks;
        if (c < kRows * S::kChunks && rr < rows && first_chunk + chunk < a.row_chunks)
          exact::cp_async16(stage + rr * S::kSegmentBytes + 16 * chunk,
                            a.w + static_cast<size_t>(it.row0 + rr) * a.w_stride + 16 * (first_chunk + chunk));
      }
    }
    exact::cp_async_commit();  // possibly empty: one group per item
  };
  auto wait_copy = [&](int) {
    exact::cp_async_wait<kStages - 1>();
    __syncwarp();
  };
#endif
  // The first weights are on their way while the kernel ahead is finishing (weights are read
  // before wait_for_inputs: no kernel writes them) and while the row is quantized. Asking more
  // of them into L2 here (prefetch.global.L2, the block's first 6/16/32 MB of the matrix's
  // share) made llama3-8b's b1 step slower: 1932 -> 1937/1975/2058 us (one run, stop 30). So did
  // the kernel ahead (norm, GLU, attention) asking them into L2 with bulk prefetches
  // (cp.async.bulk.prefetch.L2, 8/16/32 MB): step 1940 -> 3036/4367/6566 us, the norm's two
  // CTAs spending 28-83 us a call issuing them (stop 31). So did a kernel of its own, on a
  // branch of the graph beside the decode step's attention (HBM is idle then), asking the first
  // 16-40 MB of the MLP's gate/up matrix into L2 (stop 33, one run): step 1926 -> 1941-1951 us.
  // It only ran beside attention at the highest stream priority (else it found no room until
  // attention ended and slowed the output projection instead: 2241 us), attention lost ~1 us a
  // layer to its traffic, and gate/up gained only 0.5-0.9 us of its 18.2: this kernel streams
  // ~3.9 TB/s whether its bytes come from HBM or L2.
  for (int i = 0; i < kStages - 1; ++i) issue_copy(i);
  wait_for_inputs();
  TokenActivations act = a.act;
  if constexpr (kQuantizes) act = quantize_row<F>(a, shared + S::kSharedBytes);

  // The folding warps' accumulators of row lane % kRows (chain lane / kRows), token
  // warp + kWarps * f; warp 0 alone folds when there is one token.
  float acc[kFolded] = {};
  const bool folds = warp < (kTokens == 1 ? per_item : kTokens);
  float bias = 0.0f;  // folding warps, lanes j == 0: the bias of row r of the group they fold
  for (int i = 0; i < items; ++i) {
    const Item it = item_at(i);
    const int round = it.round, p = it.pass, rows = it.rows;
    // The group this warp folds: group `warp` of the set where a set has several, else the set's.
    const int folded_group = per_item > 1 ? warp : 0;
    const int64_t fold_row0 = it.row0 + static_cast<int64_t>(folded_group - set_group) * kRows;
    const int fold_rows = group_rows(fold_row0);
    float4* ops = operands + (S::kBuffers == 2 ? (i & 1) : 0) * kTokens * S::kTokenStride;
    issue_copy(i + kStages - 1);
    // The bias (a one-row step's residual too, for MatMulAdd: cuda_backend.cpp) is asked for
    // while the weights arrive: loaded where it is added, the row's last fold step waited on it.
    if (folds && round == 0 && a.addend.bias != nullptr && j == 0 && r < fold_rows) bias = a.addend.bias[fold_row0 + r];
    // This lane's blocks' activations are on their way too before it waits for the weights.
    const bool computes = p < passes && r < rows;
    typename F::Activations x[S::kUnits];
    if (computes) {
#pragma unroll
      for (int u = 0; u < S::kUnits; ++u)
        x[u] = F::load_activations(act, min(p * S::kSpan + u * kLanesPerRow + j, a.blocks - 1));
    }
    wait_copy(i);
    if (computes) {
      const uint8_t* segment = stages + i % kStages * S::kStageBytes + r * S::kSegmentBytes +
                               (static_cast<size_t>(p) * S::kSpan * F::kBlockBytes) % 16;
#pragma unroll
      for (int u = 0; u < S::kUnits; ++u) {
        const int within = u * kLanesPerRow + j;  // block of the segment
        const int b = p * S::kSpan + within;
        if (b < a.blocks)
          ops[r * S::kRoundStride + warp * S::kSpan + within] = F::terms(segment + within * F::kBlockBytes, x[u]);
      }
      // The other tokens' terms from the same staged segment, their activations loaded in turn
      // (a whole set of Q8_K activations is 73 registers: one token's at a time).
      for (int t = 1; t < kTokens && t < a.tokens; ++t) {
        const TokenActivations act_t = token_activations(a, t);
#pragma unroll
        for (int u = 0; u < S::kUnits; ++u) {
          const int within = u * kLanesPerRow + j;
          const int b = p * S::kSpan + within;
          if (b < a.blocks)
            ops[t * S::kTokenStride + r * S::kRoundStride + warp * S::kSpan + within] =
                F::terms(segment + within * F::kBlockBytes, F::load_activations(act_t, b));
        }
      }
    }
    __syncthreads();  // the round's operands are complete (with one token, the other buffer is free again)
    if (folds) {
      // The round's blocks in order: k-quants one chain per row (lanes 0..7); the 32-element
      // formats four, block b to chain b % 4 = lane / kRows. The folded group's operands start
      // at its first warp's (where a set has several groups, all of a row's blocks are one round).
      const int first_block = round * kWarps * S::kSpan;
      const int group_ops = folded_group * passes * S::kSpan;
#pragma unroll
      for (int f = 0; f < kFolded; ++f) {
        const int t = kTokens == 1 ? 0 : warp + kWarps * f;
        if (t >= a.tokens) break;  // warp-uniform
        const float4* token_ops = ops + t * S::kTokenStride + group_ops;
        if (S::kKQuant ? j == 0 : true) {
          for (int s = S::kKQuant ? 0 : j; s < kWarps * S::kSpan && first_block + s < a.blocks;
               s += S::kKQuant ? 1 : kLanesPerRow) {
            const float4 o = token_ops[r * S::kRoundStride + s];
            acc[f] = __fmaf_rn(o.x, o.y, acc[f]);
            if constexpr (F::kHasMin) acc[f] = __fmaf_rn(o.z, o.w, acc[f]);
          }
        }
        if (round == rounds - 1) {
          float v = acc[f];
          if constexpr (!S::kKQuant) {  // (acc0 + acc1) + (acc2 + acc3)
            const float a1 = __shfl_sync(0xffffffffu, acc[f], kRows + r);
            const float a2 = __shfl_sync(0xffffffffu, acc[f], 2 * kRows + r);
            const float a3 = __shfl_sync(0xffffffffu, acc[f], 3 * kRows + r);
            v = __fadd_rn(__fadd_rn(acc[f], a1), __fadd_rn(a2, a3));
          }
          if (j == 0 && r < fold_rows) {
            // The bias came with the weights; a residual (several tokens) is loaded here.
            if (a.addend.bias != nullptr) v = __fadd_rn(v, bias);
            else v = a.addend.added(v, t, fold_row0 + r);
            a.out[t * a.out_stride + fold_row0 + r] = v;
          }
          acc[f] = 0.0f;
        }
      }
    }
    // One buffer for several tokens: folded before the next round's terms overwrite it.
    if constexpr (S::kBuffers == 1) __syncthreads();
    __syncwarp();  // this warp's stage is refilled by the copy issued next item
  }
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  exact::cp_async_wait<0>();
#endif
}

// Widest activation row: its quantized form must fit in shared memory next to the stages.
constexpr int64_t kMaxColumns = 32768;

template <class F, bool kQuantizes, int kTokens>
void launch(const OneTokenArgs& a, int sm_count, cudaStream_t stream) {
  const auto kernel = gemv_one_token_kernel<F, kQuantizes, kTokens>;
  using S = Staging<F, kTokens>;
  const size_t shared = S::kSharedBytes + (kQuantizes ? activation_bytes(a.k) : 0);
  // The widest row's shared memory is allowed once; the blocks a multiprocessor holds at this
  // launch's (registers and shared memory) are the driver's answer, cached per device.
  static const bool configured = [&] {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(S::kSharedBytes + (kQuantizes ? activation_bytes(kMaxColumns) : 0))),
          "one-token gemv shared memory");
    return true;
  }();
  (void)configured;
  const int blocks_per_sm =
      std::max(1, resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), kThreads, shared));
  const int64_t groups = (a.n + kRows - 1) / kRows;
  const int64_t resident = int64_t{sm_count} * blocks_per_sm;
  OneTokenArgs args = a;
  args.per_item = groups_per_item((a.blocks + S::kSpan - 1) / S::kSpan, kTokens, groups, resident);
  const int64_t sets = (groups + args.per_item - 1) / args.per_item;
  // Every resident block, though some then take a group more than others (llama3-8b's q/k/v:
  // 768 groups, 240 of 528 blocks take two). Spreading them evenly over fewer blocks (384 of two)
  // ran slower, step 1943.0 -> 2031.1 us (H200, one run, stop 32): the product was no faster
  // (5.60 -> 5.58 us a layer) and the kernels after it lost their early start (attention 8.79 ->
  // 11.05, glu_quantize 2.87 -> 4.02).
  const int64_t grid = std::min<int64_t>(sets, resident);
  launch_kernel("one-token gemv kernel", kernel, static_cast<unsigned>(grid), kThreads, shared, stream, args);
}

}  // namespace

bool gemv_one_token_supported(const TensorRef& w) {
  return w.cols <= kMaxColumns && exact::visit_exact_format(w.dtype, [](auto) {});
}

// Each further token costs a pass over the staged weights (its terms, one after another), so
// the kernel gains only while streaming the weights is the larger cost. H200, one run each,
// CudaPerf.MatmulThroughput (32768 x 8192, GB/s of weights, gemv.cu -> this kernel):
//  - the k-quants at 2 / 4 / 8 rows: Q4_K 1391 -> 2656, 762 -> 1692, 415 -> 827; Q5_K 1674 ->
//    2273, 924 -> 1381, 492 -> 781; Q6_K 1894 -> 2388, 1110 -> 1224, 618 -> 680;
//  - the 32-element formats at 2 rows: Q4_0 1012 -> 1648, Q4_1 1077 -> 2018, Q5_0 1090 -> 1591,
//    Q8_0 1929 -> 2384. At 4 and 8 rows (another run) they lost or tied: Q8_0 1393 -> 1132,
//    563 -> 456; Q4_0 694 -> 807, 273 -> 272; Q5_0 323 -> 301 at 8. Their lanes take four
//    blocks a pass, each token's in turn.
// bench generation tok/s, same run: llama3-8b Q4_K b2 / b4 / b8 471.2 / 562.8 / 665.1 -> 755.8 /
// 968.1 / 1139.1 (1.60x / 1.72x / 1.71x); SmolLM2's shape (Q4_1) b2 in graphs 2057.0 -> 2230.3.
// Asking the other tokens' activations into L1 ahead of their terms lost (Q4_K 8 rows 827 ->
// 664 GB/s, llama3-8b b8 1139 -> 924 tok/s): a long row's eight tokens do not fit beside the
// stages. So did asking only the next token's, while this token's terms are formed (same run,
// b2 / b4 / b8: 763 / 916 / 1009 -> 621 / 631 / 855 tok/s).
int64_t gemv_one_token_max_rows(const TensorRef& w) {
  if (w.cols > kMaxColumns) return 0;
  int64_t rows = 0;
  exact::visit_exact_format(w.dtype, [&]<class Format>(Format) {
    rows = exact::one_lane::TermsOf<Format>::type::kElems == 256 ? kGemvSharedWeightsMaxRows : 2;
  });
  return rows;
}

void launch_gemv_one_token(const TensorRef& x, const QuantizedActivations* q, const TensorRef& w,
                           const ProductAddend& addend, const TensorRef& out, int sm_count, cudaStream_t stream) {
  const size_t padded_row = (row_bytes(w.dtype, w.cols) + 15) / 16 * 16;  // what the copies may read
  const int64_t max_rows = q != nullptr ? gemv_one_token_max_rows(w) : 1;
  if (x.rows < 1 || x.rows > max_rows || out.rows != x.rows || x.dtype != DType::F32 || x.cols != w.cols ||
      reinterpret_cast<uintptr_t>(x.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.row_stride % 16 != 0 || w.row_stride < padded_row ||
      !gemv_one_token_supported(w))
    fail(ErrorCode::Internal, "one-token gemv: unsupported operands (", dtype_name(w.dtype), ", ", x.rows, " x ",
         x.cols, ")");
  if (w.rows == 0) return;
  OneTokenArgs args{};
  args.k = w.cols;
  args.x = static_cast<const float*>(x.data);
  if (q != nullptr) args.act = {q->codes, q->scales, q->sums, q->group_sums};
  args.w = static_cast<const uint8_t*>(w.data);
  args.w_stride = w.row_stride;
  args.row_chunks = padded_row / 16;
  args.n = w.rows;
  args.tokens = static_cast<int>(x.rows);
  args.codes_stride = q != nullptr ? q->row_stride : 0;
  args.out = static_cast<float*>(out.data);
  args.out_stride = out.row_stride / sizeof(float);
  args.addend = addend;
  const bool known = exact::visit_exact_format(w.dtype, [&]<class Format>(Format) {
    using F = typename exact::one_lane::TermsOf<Format>::type;
    args.blocks = static_cast<int>(w.cols / F::kElems);
    if (q == nullptr)
      launch<F, true, 1>(args, sm_count, stream);
    else if (x.rows == 1)
      launch<F, false, 1>(args, sm_count, stream);
    else if (x.rows == 2)
      launch<F, false, 2>(args, sm_count, stream);
    else if constexpr (F::kElems == 256) {  // more rows: the k-quants only (gemv_one_token_max_rows)
      if (x.rows <= 4)
        launch<F, false, 4>(args, sm_count, stream);
      else
        launch<F, false, 8>(args, sm_count, stream);
    }
  });
  if (!known) fail(ErrorCode::Internal, "one-token gemv: no kernel for ", dtype_name(w.dtype));
}

}  // namespace cellm::cuda
