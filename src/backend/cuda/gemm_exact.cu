// The exact product of quantized weights with quantized activations for many activation rows
// (prefill, decode of many sequences), on the int8 tensor cores. A block of 8 warps owns 64
// weight rows x 64 activation rows (32 where 64 would leave multiprocessors idle, and for
// Q4_K/Q5_K/Q6_K 16 for 16 rows or fewer; for those also blocks of 32 weight rows and 4 warps
// where blocks of 64 would leave multiprocessors idle, and for Q6_K's tiles of 16 and 32 rows
// always: gemm_tile.h's choose_gemm_tile) and walks K
// in steps of 256 elements (eight 32-element blocks, or one super-block):
//  1. the step's raw weight bytes (the 16-byte chunks around them), activation codes and
//     scales come to shared memory with cp.async, one step ahead of the step being multiplied;
//     except for Q4_K/Q5_K the weights are then decoded there to int8 rows with the GEMV's
//     decoders (weight_units_int8.cuh), block scales beside them;
//  2. each warp multiplies 16 weight rows by half the block's activation rows with mma.sync
//     m16n8k32 (k16 for Q6_K's 16-element scale groups), fragments by ldmatrix: per 32-element
//     block (per sub-block or group for the k-quants) the exact integer sums of the contract.
//     Q4_K/Q5_K take their fragments from the raw super-blocks (multiply_direct): a 32-byte
//     run of codes holds two sub-blocks, one per nibble, at the same element positions, so
//     one ldmatrix and two masks make both A fragments, with no decoding pass and no barrier
//     between decoding and multiplying. H100, one run, against the decoding path (which applied
//     the scales on the tensor cores, three products a sub-block): 64 rows of llama3-8b's
//     shapes, q/o 0.0353 -> 0.0257 ms, down 0.1043 -> 0.0752, gate/up 0.0647 -> 0.0630; 512
//     rows 1.01-1.03x; llama3-8b batch-64 generation 4280.5 -> 4883.9 tok/s (1.14x), prompt
//     8547 -> 8889 tok/s. Their mins' sums come from the activations' group sums (min_sums),
//     not from products of the codes: H100, one run, 64 rows, gate+up 0.1155 -> 0.0933 ms
//     (1.24x), down 0.0678 -> 0.0639, o 0.0237 -> 0.0223, q/k/v 0.0338 -> 0.0345; llama3-8b
//     batch-64 generation 6166 -> 6803 tok/s (1.10x), prompt 9503 -> 11517 (1.21x);
//  3. the float steps are the contract's, per output in block order, as in the GEMV
//     (matmul_kernels.h), so an output is bit-identical whichever kernel computed it.
// Measured (ncu, H200, Q4_K): the kernel is bound by issued instructions, not by memory; the
// per-step copies and the integer scaling were most of them before they took their present form.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/gemm_tile.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/weight_units_int8.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using namespace exact;

// Weight rows per block: 64, or for Q4_K/Q5_K 32 where 64 would leave multiprocessors idle
// (choose_gemm_tile). Four threads copy each weight row, and a warp multiplies 16 of them by
// half the block's activation rows: 8 warps, or 4.
constexpr int kRows = kGemmMaxWeightRows;
template <int kR>
constexpr int kThreadsFor = 4 * kR;
// Activation rows per block: 64, or 32 (16) where 64 would leave multiprocessors idle (few
// weight rows, or few activation rows: a decode step of a few dozen sequences). See
// choose_gemm_tile.
constexpr int kMaxTokens = kGemmMaxActivationRows;
constexpr int kStepElems = 256;
constexpr int kTileStride = kStepElems + 16;  // bytes per int8 tile row: conflict-free fragment reads
// Q4_K/Q5_K: a super-block's 16 group sums (32 bytes) per activation row, rows 48 bytes apart so
// that eight rows' same word falls in eight different banks.
constexpr int kGroupStride = 24;  // int16 per row
// Steps in flight: the one multiplied and the one being copied. Two blocks share a
// multiprocessor (registers held to 128), so one block's copies and barriers hide behind the
// other's multiplies; three stages fit one block only and ran 1.3x slower (H200, Q4_K). The
// direct Q4_K/Q5_K path (no decoded tiles) fits two blocks of three stages, which changed
// nothing (H100, llama3-8b batch 64: 4883.9 tok/s at two stages, 4884.2 at three).
constexpr int kStages = 2;
constexpr int kBlocksPerSm = kGemmBlocksPerSm;

__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
               : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// c = a x b, a unsigned (Q4_K/Q5_K codes, or mins against the high bytes of Q8_K's group sums).
__device__ __forceinline__ void mma_u8_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// c = a x b, both unsigned (mins against the low bytes of Q8_K's group sums).
__device__ __forceinline__ void mma_u8_u8_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// Four 8 x 16-byte tiles from shared memory in one instruction: lane l names row l % 8 of tile
// l / 8 and receives word lane % 4 of row lane / 4 of each tile, which is how mma.sync wants
// its A and B fragments (one instruction where word loads took four).
__device__ __forceinline__ void load_tiles(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))));
}

template <class F, int kR = kRows>
struct Tile {
  static constexpr bool kKQuant = F::kElems == 256;
  static constexpr int kBlocks = kKQuant ? 1 : 8;  // weight blocks per step
  static constexpr int kStepBytes = kBlocks * F::kBlockBytes;
  // The aligned chunks around a step (up to 15 bytes before it) and the readers' slack.
  static constexpr int kRawBytes = (kStepBytes + 15 + 15) / 16 * 16 + 16;
  static constexpr bool kBlockSums = F::kHasMin && !kKQuant;  // Q4_1/Q5_1: Q8_1 sums per block
  // Q4_K/Q5_K: fragments straight from the raw super-blocks (multiply_direct), nothing decoded.
  static constexpr bool kDirect = F::kType == DType::Q4_K || F::kType == DType::Q5_K;
  // The 16-row activation tiles and the 32-row weight tiles (gemm_tile.h): the direct formats,
  // and Q6_K, which real Q4_K_M files hold (the output, ffn_down and attn_v of about half the
  // layers) and whose 1024- and 4096-row products filled a quarter to half of the
  // multiprocessors in blocks of 64 x 32 or 64 x 64.
  static constexpr bool kSmallTiles = kDirect || F::kType == DType::Q6_K;
  static constexpr int kDecodedRows = kDirect ? 1 : kR;
};

// What one step needs from device memory, copied in while earlier steps are decoded and
// multiplied (kStages of these in flight).
template <class F, int kTokens, int kR>
struct Stage {
  using Tl = Tile<F, kR>;
  alignas(16) uint8_t raw[kR][Tl::kRawBytes];
  alignas(16) int8_t x[kTokens][kTileStride];
  alignas(16) float xd[Tl::kBlocks][kTokens];                  // activation scale per block
  alignas(16) float xs[Tl::kBlockSums ? 8 : 1][kTokens];       // Q8_1 sums per block
  alignas(16) int16_t groups[Tl::kDirect ? kTokens : 1][kGroupStride];  // Q8_K group sums (multiply_direct)
};

template <class F, int kTokens, int kR>
struct Shared {
  static constexpr int kDecoded = Tile<F, kR>::kDecodedRows;
  Stage<F, kTokens, kR> stage[kStages];
  // The step's weights decoded (not for Q4_K/Q5_K, read raw): int8 rows, scales beside them.
  alignas(16) int8_t w[kDecoded][kTileStride];
  float wd[8][kDecoded];                  // 32-element formats: d per block; Q6_K: [0] d
  float wm[8][kDecoded];                  // Q4_1/Q5_1: m per block
  alignas(16) int32_t wsc[kDecoded][16];  // Q6_K group scales
};

struct GemmArgs {
  const uint8_t* w;
  size_t w_stride;
  int64_t n;
  int blocks;  // per row
  QuantizedActivations act;
  int64_t tokens;
  float* out;
  size_t out_stride;
  ProductAddend addend;
};

// What a thread copies every step: four threads share a weight row and kThreadsFor<kR> / kTokens
// an activation row, each taking every fourth (eighth) 16-byte chunk of
// them. The row addresses are worked out once; a step only adds its offset (per-step address
// arithmetic and per-row loops cost more instructions than the multiply, measured by ncu).
// Addressing the stages by 32-bit shared offsets worked out once as well changed nothing
// (H200, Q4_K 14336 x 4096 at 512 rows: 0.395 -> 0.398 ms; llama3-8b b64 within noise); once
// the mins left Q4_K/Q5_K's product loop it paid there (DirectCopies).
struct CopyRows {
  const uint8_t* w;    // this thread's weight row
  const int8_t* x;     // its activation row's codes
  int64_t t;           // that activation row
  bool padding;        // the tile row is past the last activation row: nothing to copy
  int r, q;            // weight tile row, first chunk
  int xr, xq;          // activation tile row, first chunk
};
template <int kTokens, int kR>
__device__ __forceinline__ CopyRows copy_rows(const GemmArgs& a, int64_t n0, int64_t t0) {
  constexpr int kPerRow = kThreadsFor<kR> / kTokens;
  CopyRows c;
  c.r = threadIdx.x / 4, c.q = threadIdx.x % 4;
  c.xr = threadIdx.x / kPerRow, c.xq = threadIdx.x % kPerRow;
  c.w = a.w + static_cast<size_t>(min(n0 + c.r, a.n - 1)) * a.w_stride;
  c.padding = t0 + c.xr >= a.tokens;
  c.t = min(t0 + c.xr, a.tokens - 1);
  c.x = a.act.codes + c.t * a.act.row_stride;
  return c;
}

// Step s's raw weight bytes (the 16-byte chunks around them) into st by cp.async. Weights are
// written by no kernel, so this may run before wait_for_inputs().
template <class F, class St>
__device__ __forceinline__ void copy_step_weights(const GemmArgs& a, const CopyRows& c, St& st, int s) {
  using Tl = Tile<F>;
  constexpr int kMaxChunks = (Tl::kStepBytes + 30) / 16;
  const int row_bytes = a.blocks * F::kBlockBytes;
  const int start = s * Tl::kStepBytes, end = min(row_bytes, start + Tl::kStepBytes);
  const int aligned = start & ~15;
  const int chunks = (end - aligned + 15) / 16;
  const uint8_t* src = c.w + aligned;
#pragma unroll
  for (int i = 0; i < (kMaxChunks + 3) / 4; ++i) {
    const int chunk = c.q + 4 * i;
    if (chunk < chunks) cp_async16(&st.raw[c.r][16 * chunk], src + 16 * chunk);
  }
}

// Step s's activation codes, scales and sums into st by cp.async.
template <class F, int kTokens, int kR>
__device__ __forceinline__ void copy_step_activations(const GemmArgs& a, const CopyRows& c, Stage<F, kTokens, kR>& st,
                                                      int s) {
  using Tl = Tile<F, kR>;
  constexpr int kPerRow = kThreadsFor<kR> / kTokens;
  // A padding row's products go to outputs nobody stores, and tokens never mix in a product,
  // so its tile row may hold anything. Copying the last row into every padding row (all of
  // them reading one address) made a tile slower the more of it was padding: H100, one run,
  // llama3-8b's shapes (CudaMatmulPerf.Llama3_8BFewRows), q/k/v at 9 rows 0.0312 -> 0.0207 ms
  // (16 rows: 0.0207), at 17 0.0351 -> 0.0230; gate+up at 48 0.1538 -> 0.1113.
  if (c.padding) return;
  const int step_blocks = min(Tl::kBlocks, a.blocks - s * Tl::kBlocks);
  const int code_chunks = step_blocks * F::kElems / 16;
  const int8_t* codes = c.x + static_cast<int64_t>(s) * kStepElems;
#pragma unroll
  for (int i = 0; i < kStepElems / 16 / kPerRow; ++i) {
    const int chunk = c.xq + kPerRow * i;
    if (chunk < code_chunks) cp_async16(&st.x[c.xr][16 * chunk], codes + 16 * chunk);
  }
  const int64_t first = c.t * a.blocks + s * Tl::kBlocks;  // the row's scale of the step's first block
#pragma unroll
  for (int b = c.xq; b < Tl::kBlocks; b += kPerRow) {
    if (b >= step_blocks) continue;
    cp_async4(&st.xd[b][c.xr], a.act.scales + first + b);
    if constexpr (Tl::kBlockSums) cp_async4(&st.xs[b][c.xr], a.act.sums + first + b);
  }
}

// The copies above behind the interface of DirectCopies: step s's weights or activations into
// stage k.
template <class F, int kTokens, int kR>
struct StepCopies {
  using St = Stage<F, kTokens, kR>;
  const GemmArgs& a;
  St* stages;
  CopyRows rows;
  __device__ StepCopies(const GemmArgs& args, St* st, int64_t n0, int64_t t0)
      : a(args), stages(st), rows(copy_rows<kTokens, kR>(args, n0, t0)) {}
  __device__ void weights(int s, int k) const { copy_step_weights<F>(a, rows, stages[k], s); }
  __device__ void activations(int s, int k) const { copy_step_activations<F, kTokens, kR>(a, rows, stages[k], s); }
};

// Q4_K/Q5_K's copies: a step is one super-block, a whole number of 16-byte chunks, and no step
// is partial, so a thread's shared addresses in stage 0 and its sources at step 0 are worked out
// once and a step adds only the stage's and the step's offsets. ncu, H100, llama3-8b's gate+up
// at 64 rows: the general copies' per-step addressing (a generic-to-shared conversion a copy,
// the bounds of a partial step) was 183 of 742 instructions a warp and step, and 31% of the
// stall samples. Each row's 16 group sums (min_sums) come too. H100, one run each against the
// kernel before min_sums, ms at 64 rows, min_sums alone -> with these copies: gate+up 1.24x ->
// 1.28x (0.0899 ms), down 1.05x -> 1.10x, o 1.04x -> 1.08x; llama3-8b batch-64 generation 1.10x
// -> 1.12x (7002 tok/s).
template <class F, int kTokens, int kR>
struct DirectCopies {
  using St = Stage<F, kTokens, kR>;
  static_assert(F::kBlockBytes % 16 == 0, "a step's weights are whole 16-byte chunks");
  static constexpr int kPerRow = kThreadsFor<kR> / kTokens;  // threads an activation row
  static_assert(kPerRow >= 2, "two threads copy a row's group sums");
  static constexpr int kWeightChunks = F::kBlockBytes / 16;  // a row's, four threads a row
  unsigned w_dst, x_dst, xd_dst, g_dst;                       // in stage 0
  const uint8_t* w_src;                                       // at step 0
  const int8_t* x_src;
  const float* xd_src;
  const int16_t* g_src;
  int q, xq;
  bool padding;  // the tile row is past the last activation row (copy_step_activations)

  // The rows and first chunks are copy_rows' (the general copies'); only the addressing differs.
  __device__ DirectCopies(const GemmArgs& a, St* stages, int64_t n0, int64_t t0) {
    const CopyRows c = copy_rows<kTokens, kR>(a, n0, t0);
    q = c.q, xq = c.xq, padding = c.padding;
    w_dst = static_cast<unsigned>(__cvta_generic_to_shared(&stages[0].raw[c.r][16 * q]));
    x_dst = static_cast<unsigned>(__cvta_generic_to_shared(&stages[0].x[c.xr][16 * xq]));
    xd_dst = static_cast<unsigned>(__cvta_generic_to_shared(&stages[0].xd[0][c.xr]));
    g_dst = static_cast<unsigned>(__cvta_generic_to_shared(&stages[0].groups[c.xr][8 * (xq % 2)]));
    w_src = c.w + 16 * q;
    x_src = c.x + 16 * xq;
    xd_src = a.act.scales + c.t * a.blocks;
    g_src = a.act.group_sums + c.t * (int64_t{a.blocks} * 16) + 8 * (xq % 2);
  }
  __device__ void weights(int s, int k) const {
    const unsigned dst = w_dst + k * static_cast<unsigned>(sizeof(St));
    const uint8_t* src = w_src + static_cast<size_t>(s) * F::kBlockBytes;
#pragma unroll
    for (int i = 0; i < (kWeightChunks + 3) / 4; ++i)
      if (q + 4 * i < kWeightChunks) cp_async16(dst + 64 * i, src + 64 * i);
  }
  __device__ void activations(int s, int k) const {
    if (padding) return;
    const unsigned off = k * static_cast<unsigned>(sizeof(St));
    const int8_t* codes = x_src + static_cast<int64_t>(s) * kStepElems;
#pragma unroll
    for (int i = 0; i < kStepElems / 16 / kPerRow; ++i) cp_async16(x_dst + off + 16 * kPerRow * i, codes + 16 * kPerRow * i);
    if (xq < 2) cp_async16(g_dst + off, g_src + 16 * s);
    if (xq == 0) cp_async4(xd_dst + off, xd_src + s);
  }
};

// Step s's raw weights (landed in st) decoded into the shared int8 rows and scales of the
// block's kR weight rows: (row, block, part) units.
template <class F, int kR, class St, class Sh>
__device__ void decode_step(const GemmArgs& a, const St& st, Sh& sh, int s) {
  using Tl = Tile<F, kR>;
  const int offset = (s * Tl::kStepBytes) & 15;
  const int step_blocks = min(Tl::kBlocks, a.blocks - s * Tl::kBlocks);
  constexpr int kUnits = kR * Tl::kBlocks * F::kLanes;
  for (int u = threadIdx.x; u < kUnits; u += kThreadsFor<kR>) {
    const int r = u / (Tl::kBlocks * F::kLanes), b = (u / F::kLanes) % Tl::kBlocks, part = u % F::kLanes;
    if (b >= step_blocks) continue;
    const uint8_t* block = &st.raw[r][offset + b * F::kBlockBytes];
    typename F::Lane l;
    F::lane(block, part, l);
    if constexpr (Tl::kKQuant) {  // Q6_K
      F::store(l, part, sh.w[r]);
      F::store_scales(l, part, sh.wsc[r]);
      if (part == 0) sh.wd[0][r] = F::d(block);
    } else {
      F::store(l, part, &sh.w[r][32 * b]);
      if (part == 0) {
        sh.wd[b][r] = F::d(block);
        sh.wm[b][r] = F::m(block);
      }
    }
  }
}

// Where a warp's fragments are in a block's tiles: kR / 16 x 16 weight rows by 2 x kTokens / 2
// activation rows; kJ = kTokens / 16 tiles of 8 activation rows a warp.
struct WarpTile {
  int ra, rb;  // the weight rows of this thread's outputs: i < 2 ? ra : rb
  int wt;      // the warp's first activation row; output (j, i) has wt + 8j + 2 quad + (i & 1)
  int quad;
  // load_tiles addresses. A (16 weight rows x 32 bytes): tiles rows 0-7 / 8-15 by bytes 0-15 /
  // 16-31. B (two sets of 8 tokens x 32 bytes): tiles bytes 0-15 / 16-31 of the first 8
  // tokens, then of the next 8.
  int a_row, a_col, b_row, b_col;
};

template <int kJ, int kR>
__device__ __forceinline__ WarpTile warp_tile() {
  constexpr int kRowGroups = kR / 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, wr = 16 * (warp % kRowGroups), wt = 8 * kJ * (warp / kRowGroups);
  WarpTile at;
  at.ra = wr + gid, at.rb = wr + gid + 8, at.wt = wt, at.quad = lane % 4;
  at.a_row = wr + lane % 8 + 8 * (lane / 8 % 2), at.a_col = 16 * (lane / 16);
  if constexpr (kJ == 1) {  // one set of 8 tokens: tiles bytes 0-15 / 16-31 / 32-47 / 48-63
    at.b_row = wt + lane % 8, at.b_col = 16 * (lane / 8);
  } else {
    at.b_row = wt + lane % 8 + 8 * (lane / 16), at.b_col = 16 * (lane / 8 % 2);
  }
  return at;
}

// sum_j min_j (sum of x_j) of this thread's outputs (rows ra, rb; the tokens of its tiles) for
// one super-block, from the tokens' 16 group sums (Q8_K: the sums of 16 codes, two a
// sub-block): a k = 32 product whose k is the 32 bytes of the group sums, each an unsigned low
// byte and a signed high byte. A holds the min of sub-block k / 4 at the bytes of one kind and 0
// at the others, so one product (u8 x u8) sums min x low byte, another (u8 x s8) min x high
// byte, and min x sum is their sum with the second times 256. The same integers as the min
// broadcast over the codes (sum_j min_j (sum of x_j)), in two products a step instead of two a
// sub-block pair.
template <int kJ, class Groups>
__device__ __forceinline__ void min_sums(const Groups& groups, const WarpTile& at, const KScaleWords& ka,
                                         const KScaleWords& kb, int (&mins)[kJ][4]) {
  const int lane = threadIdx.x % 32, gid = lane / 4;
  // A: a0 row ra, k 4 quad .. 4 quad + 3 (groups 2 quad, 2 quad + 1: sub-block quad); a1 row rb;
  // a2, a3 the same rows at k 16 + 4 quad .. (sub-block 4 + quad). Byte quad of a mins word to
  // bytes 0 and 2 (low bytes) or 1 and 3 (high bytes), zeros between (__byte_perm's 4: byte 0
  // of the zero word).
  const uint32_t low = 0x4040u | 0x0101u * at.quad, high = 0x0404u | 0x1010u * at.quad;
  const uint32_t a_low[4] = {__byte_perm(ka.mins_lo, 0, low), __byte_perm(kb.mins_lo, 0, low),
                             __byte_perm(ka.mins_hi, 0, low), __byte_perm(kb.mins_hi, 0, low)};
  const uint32_t a_high[4] = {__byte_perm(ka.mins_lo, 0, high), __byte_perm(kb.mins_lo, 0, high),
                              __byte_perm(ka.mins_hi, 0, high), __byte_perm(kb.mins_hi, 0, high)};
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    // B: token wt + 8 j + gid, words quad (k 4 quad ..) and 4 + quad (k 16 + 4 quad ..).
    const auto* g = reinterpret_cast<const uint32_t*>(groups[at.wt + 8 * j + gid]);
    const uint32_t b0 = g[at.quad], b1 = g[4 + at.quad];
    int lo[4], hi[4];
    mma_u8_u8_k32(lo, a_low, b0, b1);
    mma_u8_k32(hi, a_high, b0, b1);
#pragma unroll
    for (int i = 0; i < 4; ++i) mins[j][i] = lo[i] + 256 * hi[i];
  }
}

// One step of Q4_K/Q5_K (a super-block of every weight row) multiplied from the raw bytes in st.
// A 64-element run jp of the codes is 32 bytes whose low nibbles are sub-block 2 jp and high
// nibbles sub-block 2 jp + 1 at the same element positions (Q5_K's fifth bits: bits 2 jp and
// 2 jp + 1 of the same positions' qh bytes), so one ldmatrix and masks give both A fragments.
// Each sub-block's integer product is scaled by its 6-bit scale in registers, one multiply-add
// a product (the sum of a run's two products added at once took a third). The mins' sums come
// from the activations' group sums (min_sums), two tensor-core products a step. The integers
// are the contract's, sum_j scale_j (codes_j . x_j) and sum_j min_j (sum of x_j), and the float
// steps after them those of every other kernel.
//
// The mins were the min broadcast over a sub-block's bytes times its codes, two products a run
// and set of 8 tokens, as many as the codes' own, and each needed its A operand moved into
// place: ncu, H100, llama3-8b's gate+up at 64 rows, 922 -> 742 instructions a warp and step
// (integer multiply-adds, moves included, 370 -> 232), 141 -> 111 us under the profiler.
template <class F, int kTokens, int kR, bool kUnrolled>
__device__ __forceinline__ void multiply_direct(const Stage<F, kTokens, kR>& st, const WarpTile& at,
                                                float (&acc)[kTokens / 16][4]) {
  static_assert(F::kBlockBytes % 16 == 0, "every super-block of a step starts a 16-byte chunk");
  constexpr int kJ = kTokens / 16;
  const uint4 head_a = *reinterpret_cast<const uint4*>(st.raw[at.ra]);
  const uint4 head_b = *reinterpret_cast<const uint4*>(st.raw[at.rb]);
  const KScaleWords ka = k_scale_words(head_a.y, head_a.z, head_a.w);
  const KScaleWords kb = k_scale_words(head_b.y, head_b.z, head_b.w);
  uint32_t qh[4] = {};
  if constexpr (F::kType == DType::Q5_K) load_tiles(qh, &st.raw[at.a_row][16 + at.a_col]);
  int isum[kJ][4] = {};
  // Unrolled where the registers allow (kUnrolled): the runs' loads and products then overlap.
  // Within 128 registers every tile of 32 activation rows or fewer unrolls without spilling
  // (ptxas: 113-125 registers); those of 64 spilled 160-236 bytes a thread.
#pragma unroll(kUnrolled ? 4 : 1)
  for (int jp = 0; jp < 4; ++jp) {
    uint32_t q[4], lo[4], hi[4];
    load_tiles(q, &st.raw[at.a_row][F::kQs + 32 * jp + at.a_col]);
#pragma unroll
    for (int i = 0; i < 4; ++i) F::codes(q[i], qh[i], jp, lo[i], hi[i]);
    // B fragments of each set j of 8 tokens: b[j][0..1] the low sub-block's, b[j][2..3] the
    // high one's.
    uint32_t b[kJ][4];
    if constexpr (kJ == 1) {
      load_tiles(b[0], &st.x[at.b_row][64 * jp + at.b_col]);
    } else {
#pragma unroll
      for (int h = 0; h < kJ / 2; ++h) {
        uint32_t bl[4], bh[4];
        load_tiles(bl, &st.x[at.b_row + 16 * h][64 * jp + at.b_col]);
        load_tiles(bh, &st.x[at.b_row + 16 * h][64 * jp + 32 + at.b_col]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          b[2 * h + e][0] = bl[2 * e], b[2 * h + e][1] = bl[2 * e + 1];
          b[2 * h + e][2] = bh[2 * e], b[2 * h + e][3] = bh[2 * e + 1];
        }
      }
    }
    const auto sa = F::scale_pair(ka, jp), sb = F::scale_pair(kb, jp);  // rows ra, rb
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      int cl[4], ch[4];
      mma_u8_k32(cl, lo, b[j][0], b[j][1]);
      mma_u8_k32(ch, hi, b[j][2], b[j][3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        isum[j][i] += (i < 2 ? sa.sc0 : sb.sc0) * cl[i];
        isum[j][i] += (i < 2 ? sa.sc1 : sb.sc1) * ch[i];
      }
    }
  }
  int mins[kJ][4];
  min_sums<kJ>(st.groups, at, ka, kb, mins);
  const float d[2] = {F::d(st.raw[at.ra]), F::d(st.raw[at.rb])};
  const float dmin[2] = {F::dmin(st.raw[at.ra]), F::dmin(st.raw[at.rb])};
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int h = i / 2;
      const float da = st.xd[0][at.wt + 8 * j + 2 * at.quad + (i & 1)];
      float& v = acc[j][i];
      v = __fmaf_rn(__int2float_rn(isum[j][i]), __fmul_rn(d[h], da), v);
      v = __fmaf_rn(__int2float_rn(mins[j][i]), __fmul_rn(dmin[h], -da), v);
    }
  }
}

// kMinBlocks: the blocks a multiprocessor must hold (choose_gemm_tile): kBlocksPerSm; 1 for a
// grid of no more blocks than multiprocessors, and 2 for blocks of 32 weight rows (4 warps),
// where a thread may hold 255 registers; 4 for blocks of 32 weight rows where more of them must
// share a multiprocessor: the 16-row activation tile, and the 32-row tiles of a grid whose last
// round would leave half the multiprocessors idle. multiply_direct unrolls where a thread may
// hold 255 registers, and for activation tiles of 32 rows or fewer.
template <class F, int kTokens, int kR, int kMinBlocks>
__global__ void __launch_bounds__(kThreadsFor<kR>, kMinBlocks) gemm_exact_kernel(GemmArgs a) {
  allow_next_kernel();
  using Tl = Tile<F, kR>;
  static_assert(Tl::kSmallTiles || kR == kRows, "only Q4_K/Q5_K/Q6_K have 32-row weight tiles");
  static_assert(Tl::kSmallTiles || kTokens >= 32, "only Q4_K/Q5_K/Q6_K have 16-row activation tiles");
  constexpr int kJ = kTokens / 16;  // the warp's tiles of 8 activation rows
  // multiply_direct unrolls where it does not spill: tiles of 32 activation rows or fewer
  // within 128 registers, and any tile whose blocks a multiprocessor holds leave a thread 255.
  constexpr bool kUnrolled = kTokens < kMaxTokens || kThreadsFor<kR> * kMinBlocks <= 256;
  extern __shared__ __align__(16) uint8_t smem[];
  auto& sh = *reinterpret_cast<Shared<F, kTokens, kR>*>(smem);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kR;
  const WarpTile at = warp_tile<kJ, kR>();
  const int lane = threadIdx.x % 32, quad = at.quad, wt = at.wt, ra = at.ra, rb = at.rb;
  const int a_row = at.a_row, a_col = at.a_col, b_row = at.b_row, b_col = at.b_col;
  constexpr int kAcc = Tl::kKQuant ? 1 : 4;
  float acc[kAcc][kJ][4] = {};
  const int steps = (a.blocks + Tl::kBlocks - 1) / Tl::kBlocks;
  using Copies = std::conditional_t<Tl::kDirect, DirectCopies<F, kTokens, kR>, StepCopies<F, kTokens, kR>>;
  const Copies copies(a, sh.stage, n0, t0);
  // The first steps' weights are asked for before the wait (no kernel writes them); each
  // step's copies are one cp.async group, steps kStages - 1 ahead of the one being multiplied.
  for (int p = 0; p < kStages - 1; ++p)
    if (p < steps) copies.weights(p, p);
  wait_for_inputs();
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < steps) copies.activations(p, p);
    cp_async_commit();
  }
  // A residual (MatMulAdd) is asked for here, right after the wait, and arrives while the first
  // steps are multiplied, where loaded in the epilogue it was a trip to memory every block took
  // last. Tiles of up to 32 activation rows (8 values a thread); larger ones load it at the end.
  // H100, llama3-8b Q4_K, one run, two rounds, grids spread, generation tok/s at batch 16 / 32 /
  // 64: 2778 / 4394 / 6072 and 2781 / 4434 / 6069 -> 2802 / 4526 / 6193 and 2806 / 4530 / 6160.
  constexpr bool kEarlyResidual = kJ <= 2;
  float residual[kEarlyResidual ? kJ : 1][4] = {};
  if constexpr (kEarlyResidual) {
    if (a.addend.residual != nullptr) {
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t n = n0 + (i < 2 ? ra : rb), t = t0 + wt + 8 * j + 2 * quad + (i & 1);
          if (n < a.n && t < a.tokens)
            residual[j][i] = a.addend.residual[static_cast<size_t>(t) * a.addend.residual_stride + n];
        }
      }
    }
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    // Step s has landed for every thread, and every warp is done with step s - 1's tiles.
    __syncthreads();
    const int ahead = s + kStages - 1;
    if (ahead < steps) {
      copies.weights(ahead, ahead % kStages);
      copies.activations(ahead, ahead % kStages);
    }
    cp_async_commit();
    const auto& st = sh.stage[s % kStages];
    if constexpr (Tl::kDirect) {
      multiply_direct<F, kTokens, kR, kUnrolled>(st, at, acc[0]);
    } else {
      decode_step<F, kR>(a, st, sh, s);
      __syncthreads();
      if constexpr (!Tl::kKQuant) {
        const int step_blocks = min(Tl::kBlocks, a.blocks - s * Tl::kBlocks);
#pragma unroll
        for (int b = 0; b < Tl::kBlocks; ++b) {
          if (b >= step_blocks) break;
          uint32_t af[4], bf[kJ / 2][4];
          load_tiles(af, &sh.w[a_row][32 * b + a_col]);
#pragma unroll
          for (int h = 0; h < kJ / 2; ++h) load_tiles(bf[h], &st.x[b_row + 16 * h][32 * b + b_col]);
#pragma unroll
          for (int j = 0; j < kJ; ++j) {
            int c[4];
            mma_k32(c, af, bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int n = i < 2 ? ra : rb, t = wt + 8 * j + 2 * quad + (i & 1);
              float& v = acc[b % 4][j][i];
              v = __fmaf_rn(small_int_to_float(c[i]), __fmul_rn(sh.wd[b][n], st.xd[b][t]), v);
              if constexpr (F::kHasMin) v = __fmaf_rn(sh.wm[b][n], st.xs[b][t], v);
            }
          }
        }
      } else {  // Q6_K
        int isum[kJ][4] = {};
        uint32_t af[4];  // groups g and g + 1 (g even)
        // One ldmatrix gives four B fragments (8 tokens x a group's 16 bytes): tile t is token
        // set t % kJ of group g0 + t / kJ, so kG = 4 / kJ groups come at once (each group in a
        // load of its own had tiles of 8 or 16 tokens read two or four times over).
        constexpr int kG = 4 / kJ;
#pragma unroll
        for (int g0 = 0; g0 < 16; g0 += kG) {
          uint32_t bf[4];
          load_tiles(bf, &st.x[wt + lane % (8 * kJ)][16 * (g0 + lane / (8 * kJ))]);
#pragma unroll
          for (int gg = 0; gg < kG; ++gg) {
            const int g = g0 + gg;
            if (g % 2 == 0) load_tiles(af, &sh.w[a_row][16 * g + a_col]);
            const uint32_t a0 = af[2 * (g % 2)], a1 = af[2 * (g % 2) + 1];
            const int sa = sh.wsc[ra][g], sb = sh.wsc[rb][g];
#pragma unroll
            for (int j = 0; j < kJ; ++j) {
              int c[4];
              mma_k16(c, a0, a1, bf[gg * kJ + j]);
#pragma unroll
              for (int i = 0; i < 4; ++i) isum[j][i] += (i < 2 ? sa : sb) * c[i];
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = i < 2 ? ra : rb, t = wt + 8 * j + 2 * quad + (i & 1);
            acc[0][j][i] = __fmaf_rn(__int2float_rn(isum[j][i]), __fmul_rn(sh.wd[0][n], st.xd[0][t]), acc[0][j][i]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t n = n0 + (i < 2 ? ra : rb), t = t0 + wt + 8 * j + 2 * quad + (i & 1);
      if (n >= a.n || t >= a.tokens) continue;
      float v = acc[0][j][i];
      if constexpr (kAcc == 4) v = __fadd_rn(__fadd_rn(acc[0][j][i], acc[1][j][i]), __fadd_rn(acc[2][j][i], acc[3][j][i]));
      // The residual loaded after the wait, or the addend's own (a bias, a later-loaded residual).
      const bool preloaded = kEarlyResidual && a.addend.residual != nullptr;
      a.out[static_cast<size_t>(t) * a.out_stride + n] =
          preloaded ? __fadd_rn(v, residual[kEarlyResidual ? j : 0][i]) : a.addend.added(v, t, n);
    }
  }
}

template <class F, int kTokens, int kMinBlocks = kBlocksPerSm, int kR = kRows>
void launch_tokens(const GemmArgs& args, cudaStream_t stream) {
  static const bool configured = [] {
    check(cudaFuncSetAttribute(gemm_exact_kernel<F, kTokens, kR, kMinBlocks>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(sizeof(Shared<F, kTokens, kR>))),
          "exact gemm shared memory");
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((args.tokens + kTokens - 1) / kTokens),
                  static_cast<unsigned>((args.n + kR - 1) / kR));
  launch_kernel("exact gemm kernel", gemm_exact_kernel<F, kTokens, kR, kMinBlocks>, grid, kThreadsFor<kR>,
                sizeof(Shared<F, kTokens, kR>),
                stream, args);
}

// The kernel of a tile (choose_gemm_tile); the formats other than Q4_K/Q5_K/Q6_K have only the
// 64-weight-row tiles of two blocks a multiprocessor.
template <class F>
void launch_tile(const GemmTile& tile, const GemmArgs& args, cudaStream_t stream) {
  if constexpr (Tile<F>::kSmallTiles) {
    if (tile == GemmTile{kMaxTokens / 4, kRows, kBlocksPerSm}) return launch_tokens<F, kMaxTokens / 4>(args, stream);
    if (tile == GemmTile{kMaxTokens / 4, kRows / 2, 4}) return launch_tokens<F, kMaxTokens / 4, 4, kRows / 2>(args, stream);
    if (tile == GemmTile{kMaxTokens / 2, kRows / 2, 2}) return launch_tokens<F, kMaxTokens / 2, 2, kRows / 2>(args, stream);
    if (tile == GemmTile{kMaxTokens / 2, kRows, 1}) return launch_tokens<F, kMaxTokens / 2, 1>(args, stream);
    if (tile == GemmTile{kMaxTokens / 2, kRows / 2, 4}) return launch_tokens<F, kMaxTokens / 2, 4, kRows / 2>(args, stream);
    if (tile == GemmTile{kMaxTokens, kRows, 1}) return launch_tokens<F, kMaxTokens, 1>(args, stream);
  }
  if (tile == GemmTile{kMaxTokens / 2, kRows, kBlocksPerSm}) return launch_tokens<F, kMaxTokens / 2>(args, stream);
  if (tile == GemmTile{kMaxTokens, kRows, kBlocksPerSm}) return launch_tokens<F, kMaxTokens>(args, stream);
  fail(ErrorCode::Internal, "exact gemm: no kernel for a tile of ", tile.activation_rows, " x ", tile.weight_rows,
       " rows, ", tile.min_blocks, " blocks a multiprocessor");
}

}  // namespace

void launch_gemm_quantized(const QuantizedActivations& q, int64_t tokens, const TensorRef& w,
                           const ProductAddend& addend, const TensorRef& out, int sm_count, cudaStream_t stream) {
  launch_gemm_quantized_tile(q, tokens, w, addend, out,
                             choose_gemm_tile(tokens, w.rows, sm_count, gemm_tile_set(w.dtype)), stream);
}

GemmTileSet gemm_tile_set(DType type) {
  GemmTileSet set = GemmTileSet::Large;
  visit_exact_format(type, [&]<class F>(F) {
    set = Tile<F>::kDirect       ? GemmTileSet::SmallDirect
          : Tile<F>::kSmallTiles ? GemmTileSet::SmallDecoded
                                 : GemmTileSet::Large;
  });
  return set;
}

void launch_gemm_quantized_tile(const QuantizedActivations& q, int64_t tokens, const TensorRef& w,
                                const ProductAddend& addend, const TensorRef& out, const GemmTile& tile,
                                cudaStream_t stream) {
  if (tokens == 0 || w.rows == 0) return;
  if ((w.rows + tile.weight_rows - 1) / tile.weight_rows > 65535)
    fail(ErrorCode::Unsupported, "exact gemm: ", w.rows, " weight rows in tiles of ", tile.weight_rows);
  GemmArgs args{static_cast<const uint8_t*>(w.data), w.row_stride, w.rows, 0, q, tokens,
                static_cast<float*>(out.data), out.row_stride / sizeof(float), addend};
  const bool known = visit_exact_format(w.dtype, [&]<class F>(F) {
    args.blocks = static_cast<int>(w.cols / F::kElems);
    launch_tile<F>(tile, args, stream);
  });
  if (!known) fail(ErrorCode::Internal, "exact gemm: no kernel for ", dtype_name(w.dtype));
}

}  // namespace cellm::cuda
