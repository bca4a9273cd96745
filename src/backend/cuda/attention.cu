// Attention over the page lists of kv/step_buffers.h, for decode and prefill rows alike, in the
// order backend/attention_order.h defines: the CPU kernel's bits (where the CPU's f16 dot uses
// AVX2/FMA, and always for f32/bf16 pools), so GPU and CPU tokens agree.
//
// The order makes each chunk of kAttentionChunk list entries an independent piece of work
// (scores, max, exponentials, sums) and only the fold of the chunks sequential, so a long
// context splits across blocks without changing a bit:
//  - split: split block s of a (row, heads) takes chunks s, s + slots, ... and writes each chunk's
//    (m_c, l_c, o_c) to the workspace; the last of those blocks to finish (an arrival counter
//    per (row, heads) in the workspace) folds them in chunk order. For decode, where rows x
//    heads alone would leave the GPU idle.
//  - in place: one block per (row, heads) folds its chunks itself, in order. For many rows, and
//    for a row with more chunks than the workspace holds per row (block 0 of its split blocks
//    does it, the others return).
// A block's heads are the query heads of one KV head (or one of them, where that many more
// blocks are needed to fill the GPU: launch_attention). Within a chunk a thread takes one list
// entry (visibility, then its K row, staged, read once for the block's heads' scores); the K
// and V rows of the visible cells come to shared memory with asynchronous copies, as a pipeline
// over a block's chunks (chunk_result: a chunk's K rows while the chunk before finishes, its V
// rows while its scores are computed), and each thread sums, cell by cell, its (head, dimension)
// outputs, one V value for all the heads it owns the column for. Cells that are not visible are
// never loaded (free cells and stale rows may hold anything, NaN included).
//
// Decode steps of few rows take the staged kernel instead: one wave of blocks (a group of
// kThreads threads per query head, a few heads of one KV head per block), each staging its
// chunk's K and V rows in shared memory. Being one wave it starts while the kernels ahead of it
// run (kernel_launch.cuh), and before its wait it already finds its chunk's cells and sends for
// the rows of those its step does not write, so that after the wait only the query and the
// step's own new cells are a trip away. H200, decode step of one row at ~570 cells (kernel
// trace): llama3-8b's shape 13.7 -> 10.0 us a call, SmolLM2's 9.7 -> 7.5. Its common head
// sizes are compile-time constants (ncu had its phases dominated by index arithmetic), and after
// the wait the query is asked for before the fresh rows; the split blocks count themselves in
// with one release/acquire instead of a fence in every thread. H200, one run, the same trace:
// llama3-8b's shape 10.36 -> 9.53 (constants) -> 8.83 us a call, SmolLM2's 7.81 -> 7.21 -> 6.87.
//
// Where the output feeds a product that quantizes its activations apart (the output projection
// of a one-row step captured in a graph, or of a few-row step), the blocks that write the output
// also quantize it (write_outputs), one kernel per layer fewer. H200, same run, kernel trace of
// a one-row step at ~570 cells: llama3-8b's shape 2018.4 -> 1987.3 us, SmolLM2's 710.1 -> 690.6
// (the attention kernel 0.3-0.4 us longer a call, the quantize kernel, 1.0-1.3 us, gone).
//
// In a decode step the staged kernel also takes the layer's rotary embedding and K/V store
// (AttentionRope, Backend::rope_kv_store_attention): after its wait each block reads its heads'
// query, the row's new key and value (one trip, as the query alone), rotates them with rope.cu's
// bits, puts the key and value rounded to the pool's type where the chunk has the row's own cell,
// and block 0 of each KV head stores them in the pool. The rope_kv_store kernel is gone. H200,
// one run, kernel trace of a one-row step at ~570 cells: SmolLM2's shape 656.6 -> 628.1 us a step
// (a layer 20.66 -> 19.69: rope_kv_store's 0.94 gone, attention 6.84 -> 7.02), llama3-8b's
// 1948.4 -> 1933.4 (rope_kv_store's 1.79 gone, but the q/k/v product 5.79 -> 6.49 and attention
// 8.88 -> 9.82 a layer: attention's rows sent for before its wait now stream beside the product,
// not beside the small kernel).
//
// Where a one-row step's attention goes (clock stamps of the folding block, H200, ~570 cells,
// us after the wait, SmolLM2's shape / llama3-8b's): query and fresh rows 0.5 / 0.6, scores
// 0.8 / 1.4, max and exponentials 0.7 / 0.7, V sums 1.0 / 1.6, partials 0.25 / 0.3, the arrival
// 0.6 / 0.65, the fold's loads, scan and factors 1.4 / 1.7, its chains 0.6 / 0.65, the quantized
// output 0.7 / 0.9: 6.9 / 8.9 us. Measured and set aside: the V sums loading the next eight cells
// before adding these eight (1.16 -> 1.14 us) and the fold issuing its o_c loads first with
// volatile loads (no change): neither phase waits on its loads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/atomic>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "backend/attention_order.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/host_libm.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "backend/cuda/quantize_rules.cuh"
#include "backend/cuda/rope_rules.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kChunk = backend::kAttentionChunk;
constexpr int kThreads = kChunk;  // one list entry per thread
constexpr int kWarps = kThreads / 32;
constexpr int kStageBytes = 32 * 1024;  // V rows staged in shared memory at a time
constexpr int kMaxSlots = 64;     // split blocks per (row, heads)
constexpr int kBlocksPerSm = 4;   // splitting stops once the grid reaches this many blocks per SM
// The staged kernel (attention_kernel): at most this many query heads per block (a group of
// kThreads threads each), and the split slots its shape aims at (a row of 2048 cells in one
// pass) and the fewest it takes.
constexpr int kStagedMaxGroups = 8;
constexpr int kStagedTargetSlots = 16;
// 2, not 8 (stop 33, H200): then the staged kernel also takes 4 and 8 rows of llama3-8b's shape
// and SmolLM2's 8. At ~640 cells (one run): attention on the critical path 31.3 -> 22.7 us a
// call at 8 rows; generation llama3-8b b4 / b8 968 / 1139 -> 1028 / 1172 tok/s, SmolLM2's b8
// 4216-4294 -> 4651. A graph serves every context, so longer ones were measured too
// (attention_scaling, 8 rows of llama3-8b's shape, ms a step): 2048 cells 0.0716 -> 0.0695,
// 8192 0.2329 -> 0.2304, 32768 2.721 -> 1.662 (the other kernel's workspace holds too few chunks
// there and it folds in place).
constexpr int kStagedMinSlots = 2;

// A block is one group of kThreads threads for the query heads it serves (the staged kernel has
// a group per head, sharing the staged rows of their KV head). A thread's place in its group is
// its list entry in a chunk and its output column.
__device__ __forceinline__ int group_thread() { return static_cast<int>(threadIdx.x) % kThreads; }
__device__ __forceinline__ int head_group() { return static_cast<int>(threadIdx.x) / kThreads; }

struct Args {
  const float* q;
  size_t q_stride;  // floats
  float* out;
  size_t out_stride;  // floats
  const char* k;
  const char* v;
  size_t row_stride;  // bytes per pool row
  int n_heads;
  int head_dim;
  int group;            // query heads per KV head
  int heads_per_block;  // divides group
  int window;
  int page_size;
  const int32_t* cell_pos;
  const int32_t* page_rows;
  const int32_t* pages;
  const int32_t* positions;
  float scale;
  float* partials;  // split: [rows][n_heads][max_chunks][head_dim + 2]; null: in place
  unsigned* arrivals;  // split: per (row, first head of a block) the blocks done so far, 0 between launches
  int max_chunks;   // chunk slots per (row, head) in `partials`
  int stage_cells;  // cells whose V rows are staged at a time (divides kChunk)
  // A chunk's K rows staged in shared memory (both kernels), k_row_bytes apart (a row and 16
  // bytes, so eight threads reading their rows' same 16 bytes hit different banks) from
  // k_stage_offset bytes on. The staged kernel (attention_kernel<..., kStagedGroups > 0>)'s
  // fresh_span: how many of a row's newest positions this launch's step may have written (its
  // rows), whose cells are copied only after the wait.
  int k_row_bytes;
  int k_stage_offset;
  int fresh_span;
  // Where the output feeds a product that quantizes its activations apart (attention_matmul):
  // the output rows quantized too, in `format`, by the block that writes them (quantized.codes
  // null: none).
  QuantizedActivations quantized;
  ActivationFormat format;
  // A decode step's rope and K/V store folded in (the staged kernel, fresh_span 1), or
  // rope.dst.cells null.
  AttentionRope rope;
};

// A float as the pool's element type, rounded as store_plain rounds it.
template <typename E>
__device__ __forceinline__ E pool_value(float v) {
  if constexpr (std::is_same_v<E, float>) return v;
  else if constexpr (std::is_same_v<E, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}

// Bytes of shared memory before the staged V rows, rounded up so they are 16-byte aligned.
__host__ __device__ constexpr size_t staging_offset(int heads, int hd) {
  return (sizeof(float) * (static_cast<size_t>(heads) * hd + static_cast<size_t>(heads) * kChunk + 4 * heads) +
          sizeof(int) * 2 * kChunk + 15) / 16 * 16;
}

template <typename E>
__device__ __forceinline__ float value_at(const char* row, int i) {
  if constexpr (std::is_same_v<E, float>) return reinterpret_cast<const float*>(row)[i];
  else if constexpr (std::is_same_v<E, __half>) return __half2float(reinterpret_cast<const __half*>(row)[i]);
  else return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
}

// The scores s = q . K * scale of one cell for `heads` query heads, in the defined order
// (head_dim a multiple of 8), into w[h * kChunk]. f16: each 16 bytes of the K row are loaded
// once for up to four heads (the heads of a KV head share the row); the others head by head.
template <typename E>
__device__ __forceinline__ void scores_of(const float* q, const char* k_row, int hd, int heads, float scale, float* w) {
  if constexpr (std::is_same_v<E, __half>) {
    constexpr int kHeads = 4;
    for (int h0 = 0; h0 < heads; h0 += kHeads) {
      float acc[kHeads][8] = {};
      for (int i0 = 0; i0 < hd; i0 += 64) {  // up to eight 16-byte loads in flight, then their products
        uint4 raw[8];
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (i0 + 8 * u < hd) raw[u] = *reinterpret_cast<const uint4*>(k_row + 2 * (i0 + 8 * u));
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          if (i0 + 8 * u >= hd) break;
          const int i = i0 + 8 * u;
          const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
          float2 kv[4];
#pragma unroll
          for (int x = 0; x < 4; ++x) kv[x] = unpack_16x2<false>(words[x]);
#pragma unroll
          for (int hh = 0; hh < kHeads; ++hh) {
            if (h0 + hh >= heads) break;
            const float4* qh = reinterpret_cast<const float4*>(q + (h0 + hh) * hd + i);  // 16-byte aligned: hd % 8 == 0
            const float4 qa = qh[0], qb = qh[1];
            const float qs[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              acc[hh][2 * x] = __fmaf_rn(qs[2 * x], kv[x].x, acc[hh][2 * x]);
              acc[hh][2 * x + 1] = __fmaf_rn(qs[2 * x + 1], kv[x].y, acc[hh][2 * x + 1]);
            }
          }
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
        if (h0 + hh >= heads) break;
        float s[4];
#pragma unroll
        for (int l = 0; l < 4; ++l) s[l] = __fadd_rn(acc[hh][l], acc[hh][l + 4]);
        w[(h0 + hh) * kChunk] = __fmul_rn(__fadd_rn(__fadd_rn(s[0], s[2]), __fadd_rn(s[1], s[3])), scale);
      }
    }
  } else {
    for (int h = 0; h < heads; ++h) {
      float dot = 0.0f;
      for (int i = 0; i < hd; ++i) dot = __fadd_rn(dot, __fmul_rn(q[h * hd + i], value_at<E>(k_row, i)));
      w[h * kChunk] = __fmul_rn(dot, scale);
    }
  }
}

// Shared memory of a block: the block's query heads, the chunk's weights, per-head scalars, the
// chunk's cells and the staged V rows. A head group sees the per-head arrays from its own
// heads on.
struct Shared {
  float* q;          // [heads][hd]
  float* w;          // [heads][kChunk]: scores, then e_j; the fold's factors after the last chunk
  float* chunk_max;  // [heads] m_c
  float* chunk_sum;  // [heads] l_c
  float* max;        // [heads] running m (in place)
  float* sum;        // [heads] running l (in place)
  int* cell;         // [kChunk] pool row of each entry, -1 if absent or not visible (entry_cell)
  int* next_cell;    // [kChunk] the same for the chunk after (ChunkCells)
  uint4* v;          // [stage_cells][V row]
  char* k;           // [kChunk][k_row_bytes] K rows
  const uint64_t* exp_table;  // libm::kExp2fTable's copy (the kernel's static shared memory)
};

__device__ __forceinline__ Shared carve(unsigned char* smem, int heads, int hd, int k_stage_offset, int first_head,
                                        const uint64_t* exp_table) {
  Shared s;
  s.exp_table = exp_table;
  float* q = reinterpret_cast<float*>(smem);
  float* w = q + heads * hd;
  float* chunk_max = w + heads * kChunk;
  s.q = q + first_head * hd;
  s.w = w + first_head * kChunk;
  s.chunk_max = chunk_max + first_head;
  s.chunk_sum = chunk_max + heads + first_head;
  s.max = chunk_max + 2 * heads + first_head;
  s.sum = chunk_max + 3 * heads + first_head;
  s.cell = reinterpret_cast<int*>(chunk_max + 4 * heads);
  s.next_cell = s.cell + kChunk;
  s.v = reinterpret_cast<uint4*>(smem + staging_offset(heads, hd));
  s.k = reinterpret_cast<char*>(smem + k_stage_offset);
  return s;
}

// The (head, dimension) outputs a thread owns in the V sums and the folds: column col (and
// col + kThreads where head_dim > kThreads: kCols = 2), each for heads head0, head0 + head_step,
// ... (its slots). Threads that share a column share its V loads. Where head_dim does not
// divide kThreads some threads own nothing.
struct Outputs {
  int col, cols;         // cols: 1 or 2 (a second column only where it is < head_dim)
  int head0, head_step;  // the thread owns something if head0 < head_step
  __device__ bool owns(int slot, int heads) const { return head0 < head_step && head0 + slot * head_step < heads; }
  __device__ int head(int slot) const { return head0 + slot * head_step; }
};

__device__ __forceinline__ Outputs outputs_of(int hd) {
  Outputs m;
  if (hd <= kThreads) {
    m.col = group_thread() % hd, m.cols = 1, m.head0 = group_thread() / hd, m.head_step = kThreads / hd;
  } else {
    m.col = group_thread(), m.cols = group_thread() + kThreads < hd ? 2 : 1, m.head0 = 0, m.head_step = 1;
  }
  return m;
}

// Calls f(slot, c, head, column) for each (head, column) output the thread owns (o[slot][c]).
template <int kHeadSlots, int kCols, class F>
__device__ __forceinline__ void for_each_owned(const Outputs& m, int heads, F&& f) {
#pragma unroll
  for (int k = 0; k < kHeadSlots; ++k) {
    if (!m.owns(k, heads)) continue;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (c < m.cols) f(k, c, m.head(k), m.col + c * kThreads);
  }
}

// Head slots and columns a thread needs for `heads` heads of head_dim (Outputs).
__host__ __device__ constexpr int head_slots(int heads, int hd) {
  const int step = hd <= kThreads ? kThreads / hd : 1;
  return (heads + step - 1) / step;
}
__host__ __device__ constexpr int column_count(int hd) { return hd <= kThreads ? 1 : 2; }

// This thread's list entry of `chunk` of row t (at position pos): the entry's pool row if its
// cell is visible, -1 if it is absent or not visible, and -2 - row for a visible cell at or past
// fresh_from (one the step may be writing now: copied only after the wait). In three parts, so
// that a pipeline of chunks can have the two dependent loads in flight while it computes:
// entry_page (the page list's entry), entry_pool_row (the cell) and entry_of (its position).
__device__ __forceinline__ int entry_page(const Args& a, int first_page, int chunk, int n_entries) {
  const int lin = chunk * kChunk + group_thread();
  return lin < n_entries ? a.pages[first_page + lin / a.page_size] : -1;
}
__device__ __forceinline__ int entry_pool_row(const Args& a, int page, int chunk) {
  return page < 0 ? -1 : page * a.page_size + (chunk * kChunk + group_thread()) % a.page_size;
}
__device__ __forceinline__ int entry_of(const Args& a, int c, int32_t cp, int32_t pos, int32_t fresh_from) {
  if (c < 0 || cp > pos || (a.window != 0 && cp <= pos - a.window)) return -1;
  return cp >= fresh_from ? -2 - c : c;
}
__device__ __forceinline__ int entry_cell(const Args& a, int t, int32_t pos, int chunk, int n_entries,
                                          int32_t fresh_from) {
  const int c = entry_pool_row(a, entry_page(a, a.page_rows[t], chunk, n_entries), chunk);
  return entry_of(a, c, c >= 0 ? a.cell_pos[c] : 0, pos, fresh_from);
}

// m_c per head (exact in any order), then e_j = expf(s_j - m_c) in place of the scores in s.w,
// 0 where this thread's entry is not visible.
__device__ __forceinline__ void chunk_weights(const Shared& s, int heads, bool visible) {
  const int warp = group_thread() / 32, lane = group_thread() % 32;
  for (int h = warp; h < heads; h += kWarps) {
    float mx = -INFINITY;
    for (int i = lane; i < kChunk; i += 32) mx = fmaxf(mx, s.w[h * kChunk + i]);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
    if (lane == 0) s.chunk_max[h] = mx;
  }
  __syncthreads();
  for (int h = 0; h < heads; ++h) {
    float& w = s.w[h * kChunk + group_thread()];
    w = visible ? libm::expf_glibc(__fsub_rn(w, s.chunk_max[h]), s.exp_table) : 0.0f;
  }
  __syncthreads();
}

// o_c and l_c of a chunk whose weights are in s.w: the visible cells' V rows, staged, summed in
// cell order; a column's V value is loaded once for all the heads the thread owns it for. l_c
// rides along: a second chain of e_j in cell order beside the V sums (adding the zeros of absent
// cells changes nothing), instead of one thread per head walking the chunk before them. With one
// head slot every thread sums it and the owner of column 0 stores it. With several (many rows:
// a block of a KV head's query heads), each warp sums one slot's, slot col / 32, and the owner of
// column 32 k stores slot k's: a thread adds one l chain a cell instead of one per slot (where
// head_dim is a multiple of 32 and has a warp of columns for every slot; else every thread sums
// every slot). The same chain, the same bits. H100, one run, attention_scaling (llama3-8b's
// layer), ms a step: 64 x 576 cells 0.1162 -> 0.1150, 64 x 2048 0.3197 -> 0.3183: the many-row
// kernel waits more than it issues.
template <typename E, int kHeadSlots, int kCols>
struct ChunkSums {
  const float* w_of[kHeadSlots];
  float l[kHeadSlots];
  int col_of[kCols];
  // The spread sums: this thread's slot (col / 32) and its weights; l_spread its chain.
  bool spread;
  int spread_slot;
  const float* w_spread;
  float l_spread;

  __device__ __forceinline__ ChunkSums(const Shared& s, const Outputs& m, int heads, int hd,
                                       float (&o)[kHeadSlots][kCols]) {
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      w_of[k] = s.w + (m.owns(k, heads) ? m.head(k) : 0) * kChunk;  // not owned: computed on head 0, unstored
      l[k] = 0.0f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[k][c] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) col_of[c] = c < m.cols ? m.col + c * kThreads : m.col;  // past head_dim: unstored
    spread = kHeadSlots > 1 && kHeadSlots <= 4 && hd % 32 == 0 && 32 * kHeadSlots <= min(hd, kThreads);
    spread_slot = m.col / 32;
    w_spread = s.w + (spread_slot < kHeadSlots && m.owns(spread_slot, heads) ? m.head(spread_slot) : 0) * kChunk;
    l_spread = 0.0f;
  }

  // Cells [s0, s0 + n) of the chunk, whose V rows are staged from v_rows on (n a multiple of 8).
  // Cells that are not visible have e = 0 and a zeroed staged row: fma(0, 0, o) is o, the same
  // bits as skipping them, and the loop needs no branch. The staged rows are walked with a
  // pointer and, for few head slots, the weights read four cells at a time: a cell is then a
  // load, a conversion and the adds, where a 64-bit offset per cell had doubled the loop's
  // instructions. Eight cells' loads batch up ahead of their multiply-adds (four left the chain
  // waiting on shared memory).
  __device__ __forceinline__ void add(const void* v_rows, int hd, int s0, int n, float (&o)[kHeadSlots][kCols]) {
    if (spread)  // warp-uniform
      add_cells<true>(v_rows, hd, s0, n, o);
    else
      add_cells<false>(v_rows, hd, s0, n, o);
  }

  template <bool kSpread>
  __device__ __forceinline__ void add_cells(const void* v_rows, int hd, int s0, int n, float (&o)[kHeadSlots][kCols]) {
    constexpr bool kWeightsByFour = kHeadSlots <= 4;  // more would hold 4 * kHeadSlots registers
    const char* v_row = static_cast<const char*>(v_rows);
    const int v_row_bytes = hd * static_cast<int>(sizeof(E));
#pragma unroll 2
    for (int c0 = 0; c0 < n; c0 += 4) {
      float4 w4[kWeightsByFour ? kHeadSlots : 1];
      if constexpr (kWeightsByFour) {
#pragma unroll
        for (int k = 0; k < kHeadSlots; ++k) w4[k] = *reinterpret_cast<const float4*>(w_of[k] + s0 + c0);
      }
      float4 ws{};
      if constexpr (kSpread) ws = *reinterpret_cast<const float4*>(w_spread + s0 + c0);
#pragma unroll
      for (int u = 0; u < 4; ++u, v_row += v_row_bytes) {
        float v[kCols];
#pragma unroll
        for (int x = 0; x < kCols; ++x) v[x] = value_at<E>(v_row, col_of[x]);
        if constexpr (kSpread) l_spread = __fadd_rn(l_spread, u == 0 ? ws.x : u == 1 ? ws.y : u == 2 ? ws.z : ws.w);
#pragma unroll
        for (int k = 0; k < kHeadSlots; ++k) {
          float w;
          if constexpr (kWeightsByFour) w = u == 0 ? w4[k].x : u == 1 ? w4[k].y : u == 2 ? w4[k].z : w4[k].w;
          else w = w_of[k][s0 + c0 + u];
          if constexpr (!kSpread) l[k] = __fadd_rn(l[k], w);
#pragma unroll
          for (int x = 0; x < kCols; ++x) {
            if constexpr (std::is_same_v<E, __half>) o[k][x] = __fmaf_rn(w, v[x], o[k][x]);
            else o[k][x] = __fadd_rn(o[k][x], __fmul_rn(w, v[x]));
          }
        }
      }
    }
  }

  __device__ __forceinline__ void store_sums(const Shared& s, const Outputs& m, int heads) const {
    if (spread) {
      if (m.col % 32 == 0 && spread_slot < kHeadSlots && m.owns(spread_slot, heads))
        s.chunk_sum[m.head(spread_slot)] = l_spread;
      return;
    }
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k)
      if (m.owns(k, heads) && m.col == 0) s.chunk_sum[m.head(k)] = l[k];
  }
};

// Byte `offset` of pool row `pool_row` (>= 0) from `base`: one 32 x 32 -> 64-bit multiply-add
// (launch_attention checks that a row's bytes fit 32 bits), where the 64-bit stride had cost
// four instructions a copy.
__device__ __forceinline__ const char* row_piece(const char* base, const Args& a, int pool_row, size_t offset) {
  return base + (static_cast<uint64_t>(static_cast<uint32_t>(pool_row)) * static_cast<uint32_t>(a.row_stride) + offset);
}

// A thread's share of the copies of a chunk's rows of KV head g to shared memory, in 16-byte
// pieces, `threads` threads copying: piece `piece` of cells first_cell, first_cell +
// cells_per_pass, ... (none where first_cell >= cells_per_pass). Its piece and first cell cost
// one division per chunk, where they had cost a division and a remainder per copy.
template <typename E>
struct RowPieces {
  static_assert(kAttentionMaxHeadDim * sizeof(float) / 16 <= kThreads, "a thread per piece of a row");
  int row_vecs;  // 16-byte pieces per row, <= threads
  int cells_per_pass, piece, first_cell;
  size_t offset;  // bytes from a pool row's start to this thread's piece of KV head g

  __device__ __forceinline__ RowPieces(int hd, int g, int threads) {
    row_vecs = hd * static_cast<int>(sizeof(E)) / 16;
    cells_per_pass = threads / row_vecs;
    piece = static_cast<int>(threadIdx.x) % row_vecs;
    first_cell = static_cast<int>(threadIdx.x) / row_vecs;
    offset = static_cast<size_t>(g) * hd * sizeof(E) + 16 * piece;
  }
  // f(c) for this thread's cells c < n.
  template <class F>
  __device__ __forceinline__ void for_cells(int n, F&& f) const {
    if (first_cell < cells_per_pass)
      for (int c = first_cell; c < n; c += cells_per_pass) f(c);
  }
  __device__ __forceinline__ uint4* v_at(const Shared& s, int c) const { return s.v + c * row_vecs + piece; }
  __device__ __forceinline__ char* k_at(const Args& a, const Shared& s, int c) const {
    return s.k + c * a.k_row_bytes + 16 * piece;
  }
};

// The chunks a block of the other kernel (many rows, or rows past one wave) takes in turn, as a
// pipeline: the next chunk's K rows come to shared memory while this chunk's weights and V sums
// are computed, and this chunk's V rows while its scores are. Its entries' cells are found
// during the scores. `cell` / `next`: the entries of the chunk now and of the one after, in
// shared memory (two arrays, swapped per chunk, so that the later V stages of a chunk still read
// its own); `mine`: this thread's entry of the chunk now. Each thread had loaded its K row
// itself, in two trips after the entries, with nothing in flight during the V sums. H100, one
// run (attention_scaling, llama3-8b's layer, alternated twice), ms a step: 16 sessions x 576
// cells 0.0429 -> 0.0357 (1.20x), 16 x 2048 0.1073 -> 0.1025, 32 x 576 0.0735 -> 0.0662 (1.11x),
// 64 x 576 0.1168 -> 0.1161, 64 x 2048 0.3124 -> 0.3193 (0.98x: at 64 rows the blocks are
// bound by their instructions; ncu at 64 x 576: 42% of issue slots, three blocks of 4 warps per
// SM). Set aside: each warp summing one head's l_c instead of every thread all of its heads'
// (a quarter of a llama3-8b thread's adds a cell) ran slower, 64 x 2048 0.319 -> 0.341 ms.
// Stall reasons at 64 x 576 (ncu, H100, stop 44): 2.8 warps of 16 per scheduler (153 registers
// and 73 KB of shared memory: three blocks per SM), their waits on L2 (long scoreboard) mostly
// on the entries' lookups and the expf table, on shared memory in the copy loops. The lookups
// now run ahead (below), the table is in shared memory and the copies take 32-bit row offsets:
// H100, one run, ms a step, 64 x 576 0.1162 -> 0.1043, 64 x 2048 0.3197 -> 0.2943, 128 x 576
// 0.1913 -> 0.1749, 32 x 576 0.0667 -> 0.0648 (without the spread sums and constant head sizes
// of ChunkSums and launch_columns).
struct ChunkCells {
  int* cell;
  int* next;
  int mine;
  // The entries' lookups run ahead of the chunks: the page entry of this thread's entry two
  // chunks on is loaded while a chunk is computed, and the cell's position one chunk on (each
  // had cost the block a trip to L2, or two, before its scores: ncu, 64 x 576, H100).
  int first_page;  // the row's first page entry
  int32_t pos;     // the row's position
  int stride;      // chunks from one of the block's chunks to its next
  int page_next;   // the page entry of this thread's entry of the block's next chunk (-1: none)
};

// The K rows of the visible entries in `cells` into s.k (RowPieces). Commits one group.
// Measured and set aside (H100, one run, attention_scaling, llama3-8b's layer, ms a step): one
// bulk copy per K and V row, issued by the row's thread and counted on a barrier per kind of row
// (the rows of entries that are not visible copied from a zero row), in place of these 16-byte
// pieces over the block: 64 x 576 cells 0.0992 -> 0.1110, 64 x 2048 0.2806 -> 0.3018, 128 x 576
// 0.1683 -> 0.1922, and llama3-8b batch-64 prompt 10.7k -> 9.6k tok/s. A bulk copy takes its
// addresses in uniform registers, so a warp whose 32 threads each copy a row issues them one
// thread at a time (ncu: each copy a loop of ELECT / R2UR / UBLKCP over the warp's threads, a
// fifth of the stall samples); the GEMV's copies are a few lanes' each.
template <typename E>
__device__ __forceinline__ void stage_k_rows(const Args& a, const Shared& s, const int* cells, int hd, int g) {
  const RowPieces<E> pieces(hd, g, kThreads);
  pieces.for_cells(kChunk, [&](int c) {
    const int pool_row = cells[c];
    if (pool_row >= 0)
      exact::cp_async16(pieces.k_at(a, s, c), row_piece(a.k, a, pool_row, pieces.offset));
  });
  exact::cp_async_commit();
}

// Before a block's first chunk (`stride` chunks before its next): its entries, and its K rows
// sent for.
template <typename E>
__device__ __forceinline__ ChunkCells first_chunk_cells(const Args& a, const Shared& s, int hd, int t, int g,
                                                        int chunk, int stride, int n_entries) {
  ChunkCells cells{s.cell, s.next_cell, -1, a.page_rows[t], a.positions[t], stride, -1};
  const int page = entry_page(a, cells.first_page, chunk, n_entries);
  cells.page_next = entry_page(a, cells.first_page, chunk + stride, n_entries);
  const int c = entry_pool_row(a, page, chunk);
  cells.mine = entry_of(a, c, c >= 0 ? a.cell_pos[c] : 0, cells.pos, INT_MAX);
  cells.cell[threadIdx.x] = cells.mine;
  __syncthreads();
  stage_k_rows<E>(a, s, cells.cell, hd, g);
  return cells;
}

// One chunk of row t for the block's heads (first: h0 within KV head g): chunk_max, chunk_sum in
// shared memory and o_c in o[slot][c] (Outputs). Returns false, block-uniformly, when no cell of
// the chunk is visible. On entry `cells` holds the chunk's entries and its K rows are on their
// way (first_chunk_cells, or the chunk before); on return, those of next_chunk (-1: none).
template <typename E, int kHeadSlots, int kCols>
__device__ __forceinline__ bool chunk_result(const Args& a, const Shared& s, const Outputs& m, int hd, int g, int heads,
                                             int next_chunk, int n_entries, ChunkCells& cells,
                                             float (&o)[kHeadSlots][kCols]) {
  const int cell = cells.mine;

  // The first V stage is sent for before the scores.
  const RowPieces<E> pieces(hd, g, kThreads);
  const int* chunk_cells = cells.cell;
  auto stage_v = [&](int s0) {
    pieces.for_cells(min(a.stage_cells, kChunk - s0), [&](int c) {
      const int pool_row = chunk_cells[s0 + c];
      uint4* to = pieces.v_at(s, c);
      if (pool_row >= 0)
        exact::cp_async16(to, row_piece(a.v, a, pool_row, pieces.offset));
      else
        *to = make_uint4(0, 0, 0, 0);  // weight 0 times +0 adds nothing: no branch per cell below
    });
    exact::cp_async_commit();
  };
  stage_v(0);
  // The next chunk's entries: their cells' positions asked for now (their page entries came during
  // the chunk before), and the page entries of the chunk after; both used after the scores.
  const bool has_next = next_chunk >= 0;
  const int next_row = has_next ? entry_pool_row(a, cells.page_next, next_chunk) : -1;
  const int32_t next_pos = next_row >= 0 ? a.cell_pos[next_row] : 0;
  const int page_after = has_next ? entry_page(a, cells.first_page, next_chunk + cells.stride, n_entries) : -1;
  exact::cp_async_wait<1>();  // this chunk's K rows (its first V stage may still be on its way)
  const bool any = __syncthreads_or(cell >= 0) != 0;
  if (any) {
    if (cell >= 0) {
      scores_of<E>(s.q, s.k + threadIdx.x * a.k_row_bytes, hd, heads, a.scale, s.w + threadIdx.x);
    } else {
      for (int h = 0; h < heads; ++h) s.w[h * kChunk + threadIdx.x] = -INFINITY;
    }
  }
  // The staged K rows are read: the next chunk's come in their place while this one finishes.
  const int next = entry_of(a, next_row, next_pos, cells.pos, INT_MAX);
  cells.page_next = page_after;
  cells.next[threadIdx.x] = next;
  __syncthreads();
  if (has_next) stage_k_rows<E>(a, s, cells.next, hd, g);
  cells.mine = next;
  int* const swapped = cells.cell;
  cells.cell = cells.next;
  cells.next = swapped;
  if (!any) return false;
  chunk_weights(s, heads, cell >= 0);

  ChunkSums<E, kHeadSlots, kCols> sums(s, m, heads, hd, o);
  for (int s0 = 0; s0 < kChunk; s0 += a.stage_cells) {
    // The stage summed next is the oldest group but the next chunk's K rows only at the first.
    if (s0 == 0 && has_next)
      exact::cp_async_wait<1>();
    else
      exact::cp_async_wait<0>();
    __syncthreads();
    sums.add(s.v, hd, s0, min(a.stage_cells, kChunk - s0), o);
    __syncthreads();  // before the staging buffer is reused
    if (s0 + a.stage_cells < kChunk) stage_v(s0 + a.stage_cells);
  }
  sums.store_sums(s, m, heads);
  return true;
}

// The staged kernel's copies of a chunk's rows (the block's KV head): the K and V rows of the
// entries in s.cell into s.k and s.v (RowPieces, the whole block copying). Without `fresh`, the
// rows of visible cells the step does not write (V rows of entries that are not visible zeroed,
// as in chunk_result); with it, those of the fresh ones. Commits one group.
template <typename E>
__device__ __forceinline__ void stage_rows(const Args& a, const Shared& s, int hd, int g, bool fresh) {
  const RowPieces<E> pieces(hd, g, static_cast<int>(blockDim.x));
  pieces.for_cells(kChunk, [&](int c) {
    const int entry = s.cell[c];
    uint4* v_to = pieces.v_at(s, c);
    if (entry == -1) {
      if (!fresh) *v_to = make_uint4(0, 0, 0, 0);
      return;
    }
    if ((entry <= -2) != fresh) return;
    const int pool_row = entry >= 0 ? entry : -2 - entry;
    exact::cp_async16(pieces.k_at(a, s, c), row_piece(a.k, a, pool_row, pieces.offset));
    exact::cp_async16(v_to, row_piece(a.v, a, pool_row, pieces.offset));
  });
  exact::cp_async_commit();
}

// The staged kernel's second half, once the kernel has waited for its inputs and sent for the
// chunk's fresh rows (stage_rows): the scores from the staged K rows and the rest as
// chunk_result.
template <typename E, int kHeadSlots, int kCols>
__device__ __forceinline__ bool staged_chunk_result(const Args& a, const Shared& s, const Outputs& m, int hd,
                                                    int heads, int entry, float (&o)[kHeadSlots][kCols]) {
  const bool visible = entry != -1;
  exact::cp_async_wait<0>();
  if (__syncthreads_or(visible) == 0) return false;
  if (visible) {
    scores_of<E>(s.q, s.k + group_thread() * a.k_row_bytes, hd, heads, a.scale, s.w + group_thread());
  } else {
    for (int h = 0; h < heads; ++h) s.w[h * kChunk + group_thread()] = -INFINITY;
  }
  __syncthreads();
  chunk_weights(s, heads, visible);
  ChunkSums<E, kHeadSlots, kCols> sums(s, m, heads, hd, o);
  sums.add(s.v, hd, 0, kChunk, o);
  __syncthreads();  // the staging and s.cell are reused by the next chunk
  sums.store_sums(s, m, heads);
  return true;
}

// The block's (row t, KV head g, first head block_h0 of its heads_per_block): blockIdx.z, and
// blockIdx.x split into KV head and part; and this thread's head group's share of them, `heads`
// heads from h0 (index in the block: in_block).
struct Place {
  int t, g, block_h0, h0, heads, in_block;
};

__device__ __forceinline__ Place place_of(const Args& a) {
  const int parts = a.group / a.heads_per_block;
  Place p;
  p.t = blockIdx.z;
  p.g = blockIdx.x / parts;
  p.block_h0 = p.g * a.group + (blockIdx.x % parts) * a.heads_per_block;
  p.heads = a.heads_per_block / (static_cast<int>(blockDim.x) / kThreads);
  p.in_block = head_group() * p.heads;
  p.h0 = p.block_h0 + p.in_block;
  return p;
}

// The staged kernel's first half of a chunk: finds the entries' cells and sends for the rows of
// those the step does not write (fresh_from: entry_cell). Returns this thread's entry.
template <typename E>
__device__ __forceinline__ int send_for_chunk(const Args& a, const Shared& s, const Place& p, int hd, int32_t pos,
                                              int chunk, int n_entries, int32_t fresh_from) {
  const int entry = entry_cell(a, p.t, pos, chunk, n_entries, fresh_from);
  if (head_group() == 0) s.cell[group_thread()] = entry;  // every group finds the same entries
  __syncthreads();
  stage_rows<E>(a, s, hd, p.g, false);
  return entry;
}

// The block's outputs of row p.t, value(slot, c, head) for each (head, column) this thread owns
// (called by every thread of the block). Where the output feeds a product that quantizes its
// activations apart, the block's heads (whole blocks of the format: attention_quantize_supported) go
// through shared memory - the query's place, no longer read - and are quantized here by
// quantize_rules.cuh, the bits launch_quantize_activations would write, with the float row.
template <int kHeadSlots, int kCols, class Value>
__device__ __forceinline__ void write_outputs(const Args& a, float* smem_base, const Outputs& m, const Place& p,
                                              int hd, Value&& value) {
  if (a.quantized.codes == nullptr) {
    float* out_row = a.out + p.t * a.out_stride + static_cast<size_t>(p.h0) * hd;
    for_each_owned<kHeadSlots, kCols>(
        m, p.heads, [&](int k, int c, int h, int col) { out_row[h * hd + col] = value(k, c, h); });
    return;
  }
  __syncthreads();  // every head group is past its last read of the query
  float* staged = smem_base + static_cast<size_t>(p.in_block) * hd;  // [the block's heads][hd]
  for_each_owned<kHeadSlots, kCols>(m, p.heads,
                                    [&](int k, int c, int h, int col) { staged[h * hd + col] = value(k, c, h); });
  __syncthreads();
  const int first = p.block_h0 * hd, count = a.heads_per_block * hd;  // the block's columns of the row
  const int row_blocks = a.n_heads * hd / activation_block_elems(a.format);
  float* y = a.out + p.t * a.out_stride;
  const auto values = [&](int at) { return *reinterpret_cast<const float4*>(smem_base + (at - first)); };
  // The loops of rms_norm_quantize_kernel, written out again: the two as one helper of
  // quantize_rules.cuh (a CTA's blocks [begin, end) in passes) took this kernel 0.36 us longer a
  // call (H200, llama3-8b b1, kernel trace, two calls: 331.5 -> 343.1 us a step).
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (a.format == ActivationFormat::Q8_K) {
    for (int b = warp; b < count / 256; b += static_cast<int>(blockDim.x) / 32)  // warp-uniform
      quantize::produce_q8_k(values, y, a.quantized, p.t, first / 256 + b, row_blocks, lane);
    return;
  }
  const int blocks = count / 32, per_pass = static_cast<int>(blockDim.x) / 8;
  for (int b0 = 0; b0 < blocks; b0 += per_pass) {  // block-uniform: every lane takes part
    const int wanted = b0 + static_cast<int>(threadIdx.x) / 8;
    const int b = first / 32 + min(wanted, blocks - 1);  // past the end: the last block, unstored
    if (a.format == ActivationFormat::Q8_1)
      quantize::produce_q8_32<true>(values, y, wanted < blocks, a.quantized, p.t, b, row_blocks, lane % 8);
    else
      quantize::produce_q8_32<false>(values, y, wanted < blocks, a.quantized, p.t, b, row_blocks, lane % 8);
  }
}

// Folding a chunk (max m_c) into the running state (max m), attention_order.h: m' = max(m, m_c),
// v = v * expf(m - m') + v_c * expf(m_c - m') for the sum and every output.
struct FoldStep {
  float a, b, m;  // expf(m - m'), expf(m_c - m'), m'
  __device__ float operator()(float v, float v_c) const { return __fadd_rn(__fmul_rn(v, a), __fmul_rn(v_c, b)); }
};
__device__ __forceinline__ FoldStep fold_step(const Shared& s, float m, float m_c) {
  const float m_new = fmaxf(m, m_c);
  return {libm::expf_glibc(__fsub_rn(m, m_new), s.exp_table), libm::expf_glibc(__fsub_rn(m_c, m_new), s.exp_table),
          m_new};
}

// Chunks folded in order by this block; writes the row's outputs for its heads.
// chunk_of(chunk, next_chunk, o): chunk_result or staged_chunk_result.
template <int kHeadSlots, int kCols, class ChunkOf>
__device__ __forceinline__ void fold_in_place(const Args& a, const Shared& s, float* smem_base, const Outputs& m,
                                              const Place& p, int hd, int n_chunks, ChunkOf&& chunk_of) {
  float acc[kHeadSlots][kCols], o[kHeadSlots][kCols];
  bool started = false;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    if (!chunk_of(chunk, chunk + 1 < n_chunks ? chunk + 1 : -1, o)) continue;
    __syncthreads();  // chunk_sum
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      if (!m.owns(k, p.heads)) continue;
      const int h = m.head(k);
      const FoldStep f = started ? fold_step(s, s.max[h], s.chunk_max[h]) : FoldStep{};
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[k][c] = started ? f(acc[k][c], o[k][c]) : o[k][c];
    }
    __syncthreads();  // every thread has read s.max before it moves on
    for (int h = group_thread(); h < p.heads; h += kThreads) {
      if (!started) {
        s.max[h] = s.chunk_max[h];
        s.sum[h] = s.chunk_sum[h];
      } else {
        const FoldStep f = fold_step(s, s.max[h], s.chunk_max[h]);
        s.sum[h] = f(s.sum[h], s.chunk_sum[h]);
        s.max[h] = f.m;
      }
    }
    started = true;
    __syncthreads();
  }
  write_outputs<kHeadSlots, kCols>(a, smem_base, m, p, hd, [&](int k, int c, int h) {
    return started ? __fdiv_rn(acc[k][c], s.sum[h]) : 0.0f;
  });
}

// The workspace slot of (row t, head, chunk): o_c [hd], then m_c and l_c.
__device__ __forceinline__ float* slot_of(const Args& a, int hd, int t, int head, int chunk) {
  return a.partials + ((static_cast<size_t>(t) * a.n_heads + head) * a.max_chunks + chunk) * (hd + 2);
}

// Factor markers of the fold below (real factors are expf values, >= 0).
constexpr float kSkipChunk = -1.0f;   // l_c = 0: no visible cell
constexpr float kFirstChunk = -2.0f;  // the first visible chunk: o = o_c

// The last split block: the row's chunks folded in order (attention_order.h) from the
// workspace, for the block's heads, kFoldBatch chunks at a time. The running max before each
// chunk is a prefix maximum (fmaxf is exact in any order): a warp per head scans it over its
// lanes, a chunk per lane, and each lane computes its chunk's factors expf(m - m'),
// expf(m_c - m') (two glibc expf, the costly part) beside the others. The running sum and the
// outputs, whose roundings make them sequential, then run as chains in registers in every
// thread that owns outputs of the head, the factors read at once. (Clock stamps, SmolLM2's
// shape, one row: with one thread per head chaining the maxima and the sums through shared
// memory the fold took ~5900 cycles at 640 cells and ~9700 at 2048, ~950 and ~2300 of them for
// the maxima; with every thread computing all factors itself the expf chain cost as much.)
// Reads with __ldcg: other blocks wrote them.
template <int kHeadSlots, int kCols>
__device__ void fold_partials(const Args& a, const Shared& s, float* smem_base, const Outputs& m, const Place& p,
                              int hd, int n_chunks) {
  constexpr int kFoldBatch = 32;  // a chunk per lane
  constexpr int kFoldLoads = 16;
  static_assert(kFoldBatch % kFoldLoads == 0 && 4 * kFoldBatch <= kChunk);
  const int heads = p.heads;
  // [heads][kFoldBatch] each, in s.w (heads * kChunk floats): l_c, then the factors a (or a
  // marker) and b. s.max[h] / s.sum[h]: the running max after the last batch and 1 once a
  // visible chunk came.
  float* fl = s.w;
  float* fa = s.w + heads * kFoldBatch;
  float* fb = s.w + 2 * heads * kFoldBatch;
  const int warp = group_thread() / 32, lane = group_thread() % 32;
  float o[kHeadSlots][kCols] = {}, l[kHeadSlots] = {};
  bool started[kHeadSlots] = {};
  for (int c0 = 0; c0 < n_chunks; c0 += kFoldBatch) {
    const int n = min(kFoldBatch, n_chunks - c0);
    // A thread of few outputs asks for its first kFoldLoads o_c now, one trip to L2 with the
    // (m_c, l_c) below instead of two.
    constexpr bool kEarly = kHeadSlots * kCols <= 2;
    float early[kEarly ? kHeadSlots : 1][kEarly ? kCols : 1][kFoldLoads];
    if constexpr (kEarly) {
      for_each_owned<kHeadSlots, kCols>(m, heads, [&](int k, int c, int h, int col) {
        const float* base = slot_of(a, hd, p.t, p.h0 + h, c0) + col;
#pragma unroll
        for (int u = 0; u < kFoldLoads; ++u)  // past n: the batch's last chunk again, unused
          early[k][c][u] = __ldcg(base + static_cast<size_t>(min(u, n - 1)) * (hd + 2));
      });
    }
    for (int h = warp; h < heads; h += kWarps) {
      const bool mine = lane < n;
      const float2 ml = mine ? __ldcg(reinterpret_cast<const float2*>(slot_of(a, hd, p.t, p.h0 + h, c0 + lane) + hd))
                             : make_float2(0.0f, 0.0f);  // (m_c, l_c); 8-byte aligned: hd and hd + 2 are even
      const bool visible = mine && ml.y != 0.0f;
      // Inclusive scan of (any visible chunk, max m_c over them) over the lanes, with the state
      // of the batches before.
      bool any = visible;
      float mx = ml.x;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const bool any_up = __shfl_up_sync(0xffffffffu, any, d);
        const float mx_up = __shfl_up_sync(0xffffffffu, mx, d);
        if (lane >= d && any_up) mx = any ? fmaxf(mx, mx_up) : mx_up, any = true;
      }
      const bool before_any = c0 > 0 && s.sum[h] != 0.0f;
      const float before_max = before_any ? s.max[h] : 0.0f;
      // The running max before this lane's chunk: the scan's lanes below, after the batches before.
      bool prev_any = __shfl_up_sync(0xffffffffu, any, 1);
      float prev_max = __shfl_up_sync(0xffffffffu, mx, 1);
      if (lane == 0) prev_any = false;
      if (before_any) prev_max = prev_any ? fmaxf(before_max, prev_max) : before_max, prev_any = true;
      float fac_a = kSkipChunk, fac_b = 0.0f;
      if (visible && !prev_any) {
        fac_a = kFirstChunk;
      } else if (visible) {
        const FoldStep f = fold_step(s, prev_max, ml.x);
        fac_a = f.a, fac_b = f.b;
      }
      if (mine) {
        fl[h * kFoldBatch + lane] = ml.y;
        fa[h * kFoldBatch + lane] = fac_a;
        fb[h * kFoldBatch + lane] = fac_b;
      }
      // The state after the batch: lane 31's scan (lanes past n add nothing) after the batches before.
      const bool batch_any = __shfl_sync(0xffffffffu, any, 31);
      const float batch_max = __shfl_sync(0xffffffffu, mx, 31);
      __syncwarp();  // every lane has read s.max[h] and s.sum[h]
      if (lane == 0) {
        s.max[h] = batch_any ? (before_any ? fmaxf(before_max, batch_max) : batch_max) : before_max;
        s.sum[h] = batch_any || before_any ? 1.0f : 0.0f;
      }
    }
    __syncthreads();
    // The sum and the outputs, chunk by chunk in order, in registers.
#pragma unroll
    for (int k = 0; k < kHeadSlots; ++k) {
      if (!m.owns(k, heads)) continue;
      const int h = m.head(k);
      for (int i = 0; i < n; i += kFoldLoads) {
        float oc[kCols][kFoldLoads];
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
#pragma unroll
          for (int u = 0; u < kFoldLoads; ++u) {  // past n: the batch's last chunk again, unused
            if constexpr (kEarly) {
              if (i == 0) {
                oc[c][u] = early[k][c][u];
                continue;
              }
            }
            const float* slot = slot_of(a, hd, p.t, p.h0 + h, c0 + min(i + u, n - 1));
            oc[c][u] = c < m.cols ? __ldcg(slot + m.col + c * kThreads) : 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < kFoldLoads; ++u) {
          if (i + u >= n) break;
          const int at = h * kFoldBatch + i + u;
          const float fac = fa[at], l_c = fl[at];
          if (fac == kFirstChunk) {
            l[k] = l_c;
#pragma unroll
            for (int c = 0; c < kCols; ++c) o[k][c] = oc[c][u];
            started[k] = true;
          } else if (fac != kSkipChunk) {
            const FoldStep f{fac, fb[at], 0.0f};
            l[k] = f(l[k], l_c);
#pragma unroll
            for (int c = 0; c < kCols; ++c) o[k][c] = f(o[k][c], oc[c][u]);
          }
        }
      }
    }
    __syncthreads();  // the factors and s.max / s.sum are rewritten by the next batch
  }
  write_outputs<kHeadSlots, kCols>(a, smem_base, m, p, hd, [&](int k, int c, int) {
    return started[k] ? __fdiv_rn(o[k][c], l[k]) : 0.0f;
  });
}

// The launch bound of a kernel of `outputs` outputs per thread (attention_kernel says why).
constexpr int min_blocks_per_sm(int staged_groups, int outputs) {
  return staged_groups > 0 || outputs > 4 ? 1 : outputs == 4 ? 3 : 4;
}

// kHeadSlots >= head_slots(heads_per_block, head_dim), kCols == column_count(head_dim). The
// kernels of few outputs per thread (every decode shape) are held to 128 registers, four
// blocks per SM: left free they took 151 and a one-row grid ran a wave more. Up to four outputs,
// not two (stop 37): that takes in llama3-8b's four heads a block of many rows (prefill, 16+
// sequences; ptxas: 128 registers, 8 bytes spilled). H100, one run, old / new: 64 sessions x
// 2048 cells 0.391 -> 0.312 ms a step, llama3-8b batch 64 4092 -> 4332 tok/s generation and
// 8040 -> 8531 tok/s prompt (kernel trace: attention 137.3 -> 114.9 us a call). With a chunk's
// K rows staged (chunk_result), such a block of llama3-8b's shape holds 72 KB of shared memory,
// three blocks per SM: the four-output kernels are held to three (ptxas: 155 registers, where
// 128 spilled 152 bytes). Measured and set aside (stop 45, H100, one run, alternated twice):
// four blocks per SM for the head-size-128 constant kernel, its K rows staged unpadded with the
// 16-byte pieces swizzled by cell (no bank conflicts), its V rows half a chunk at a time (53 KB;
// ptxas: 128 registers, 20 bytes spilled). attention_scaling, ms a step: 64 x 576 cells 0.0975 ->
// 0.0996, 64 x 2048 0.2756 -> 0.2809, 128 x 576 0.1638 -> 0.1538, 32 x 576 0.0614 -> 0.0645,
// 16 x 576 0.0341 -> 0.0385; llama3-8b batch 64 generation 6040 / 5975 -> 5967 / 5997 tok/s.
// The second V half's copy, issued once the first is summed, costs what the fourth block gains.
//
// kStaged: the launch is one wave (launch_attention), so it may start before the kernel ahead
// ends, and each block stages its chunk's K and V rows in shared memory. Before its wait it
// finds its first chunk's cells and sends for the rows of those no kernel of the step writes
// (earlier steps wrote them, and the host waited for those steps: kernel_launch.cuh); after
// it, only the query and the fresh rows (this step's own cells) are a trip away.
//
// kHeadDim: head_dim as a constant (0: a.head_dim), for the staged kernel's common head sizes.
// The index work of the copies, the scores, the V sums and the fold's workspace slots then
// folds into shifts and immediates.
template <typename E, int kHeadSlots, int kCols, int kStagedGroups, int kHeadDim>
__global__ void __launch_bounds__(kStagedGroups > 0 ? kThreads * kStagedGroups : kThreads,
                                  min_blocks_per_sm(kStagedGroups, kHeadSlots * kCols)) attention_kernel(Args a) {
  constexpr bool kStaged = kStagedGroups > 0;
  allow_next_kernel();
  // The chunks' expf read their table from shared memory: through L1 its loads had waited on L2
  // (ncu, 64 x 576, H100: 3% of the stall samples on one load). Loaded now, stored once the first
  // chunk's lookups are sent (a store now would hold warp 0 until the load is back).
  __shared__ uint64_t exp_table[32];
  const uint64_t exp_entry = threadIdx.x < 32 ? libm::exp2f_table(static_cast<int>(threadIdx.x)) : 0;
  if constexpr (!kStaged) wait_for_inputs();
  extern __shared__ __align__(16) unsigned char smem[];
  const int hd = kHeadDim > 0 ? kHeadDim : a.head_dim;
  const Place p = place_of(a);
  const Shared s = carve(smem, a.heads_per_block, hd, a.k_stage_offset, p.in_block, exp_table);
  const Outputs m = outputs_of(hd);
  const int n_entries = (a.page_rows[p.t + 1] - a.page_rows[p.t]) * a.page_size;
  const int n_chunks = (n_entries + kChunk - 1) / kChunk;
  // One chunk (or none) needs no fold: block 0 writes the output itself.
  const bool in_place = a.partials == nullptr || n_chunks > a.max_chunks || n_chunks <= 1;
  // blockIdx.y: the block's split slot. Slots past the row's chunks return at once; they come
  // last in launch order (x, the heads, varies fastest), so the working blocks of every head
  // are dispatched first (slot-major order put half the heads' work behind idle blocks).
  if (in_place && blockIdx.y != 0) return;
  if (!in_place && static_cast<int>(blockIdx.y) >= n_chunks) return;

  const int32_t pos = a.positions[p.t];
  const float* q_row = a.q + p.t * a.q_stride + static_cast<size_t>(p.h0) * hd;
  int first_entry = -1;  // kStaged: this thread's entry of the block's first chunk
  // Rope folded in (a.rope): column i of the row's new K and V row of KV head p.g, rotated
  // and rounded to the pool's type, held by thread i of head group 0 for the chunks that see the
  // row's own cell (its only fresh entry: fresh_span is 1).
  const bool rotating = kStaged && a.rope.dst.cells != nullptr;
  E own_k{}, own_v{};
  __shared__ int own_slot;
  // After send_for_chunk: the own cell's K and V rows, where this chunk has it, into its staged
  // place (head group 0 writes; the chunk's result reads them after its barrier).
  const auto place_own_rows = [&](int entry) {
    if (head_group() == 0 && entry <= -2) own_slot = group_thread();
    if (__syncthreads_or(entry <= -2) && head_group() == 0 && group_thread() < hd) {
      reinterpret_cast<E*>(s.k + own_slot * a.k_row_bytes)[group_thread()] = own_k;
      reinterpret_cast<E*>(s.v)[own_slot * hd + group_thread()] = own_v;
    }
  };
  if constexpr (kStaged) {
    first_entry = send_for_chunk<E>(a, s, p, hd, pos, blockIdx.y, n_entries, pos - a.fresh_span + 1);
    const int i = group_thread();
    rope::PairOf pair{};
    float2 cs{};
    if (rotating && i < hd) {  // the angle: positions and the table are no kernel's output
      pair = rope::pair_of(a.rope.interleaved, a.rope.angles.half, i);
      cs = rope::angle_of(a.rope.angles, pos, pair.pair);
    }
    wait_for_inputs();
    // The query (a group's one head, head_dim <= kThreads: a value per thread) asked for before
    // the fresh rows are sent for, so the two trips overlap; stored once the copies are issued.
    float q_value = i < hd ? q_row[i] : 0.0f;
    if (rotating) {
      // The query's pair partner, the new K row's two and V's column: one trip with the query.
      if (i < hd) {
        const float q_partner = q_row[pair.partner];
        const float* k_row = a.rope.k_new + p.t * a.rope.k_stride + static_cast<size_t>(p.g) * hd;
        const float k_mine = k_row[i], k_partner = k_row[pair.partner];
        const float v = a.rope.v_new[p.t * a.rope.v_stride + static_cast<size_t>(p.g) * hd + i];
        q_value = pair.first ? rope::rotated_first(q_value, q_partner, cs) : rope::rotated_second(q_partner, q_value, cs);
        const float k = pair.first ? rope::rotated_first(k_mine, k_partner, cs)
                                   : rope::rotated_second(k_partner, k_mine, cs);
        own_k = pool_value<E>(k);
        own_v = pool_value<E>(v);
        // The pool's copy, for later steps: slot 0's first block of the KV head (every row has
        // one, whatever its chunks).
        const int32_t cell = a.rope.dst.cells[p.t];
        if (cell >= 0 && blockIdx.y == 0 && p.block_h0 == p.g * a.group && head_group() == 0) {
          const size_t at = static_cast<size_t>(cell) * a.row_stride + static_cast<size_t>(p.g) * hd * sizeof(E);
          reinterpret_cast<E*>(static_cast<char*>(a.rope.dst.k) + at)[i] = own_k;
          reinterpret_cast<E*>(static_cast<char*>(a.rope.dst.v) + at)[i] = own_v;
        }
      }
      place_own_rows(first_entry);
    } else if (__syncthreads_or(first_entry <= -2)) {
      stage_rows<E>(a, s, hd, p.g, true);
    }
    if (i < hd) s.q[i] = q_value;
  } else {
    for (int i = group_thread(); i < p.heads * hd; i += kThreads) s.q[i] = q_row[i];
  }
  __syncthreads();
  // The other kernel's pipeline of chunks (chunk_result) starts with the block's first chunk.
  ChunkCells cells{};
  if constexpr (!kStaged)
    cells = first_chunk_cells<E>(a, s, hd, p.t, p.g, blockIdx.y, in_place ? 1 : static_cast<int>(gridDim.y), n_entries);
  if (threadIdx.x < 32) exp_table[threadIdx.x] = exp_entry;  // read after the chunk's barriers
  // chunk_of(chunk, next_chunk, o): next_chunk, the block's chunk after this one (-1: none).
  auto chunk_of = [&](int chunk, int next_chunk, float (&o)[kHeadSlots][kCols]) {
    if constexpr (kStaged) {
      int entry = first_entry;
      if (chunk != static_cast<int>(blockIdx.y)) {
        // The step's writers are done (the wait): only the row's own new cell, when rotating,
        // is not in the pool yet.
        entry = send_for_chunk<E>(a, s, p, hd, pos, chunk, n_entries, rotating ? pos : INT_MAX);
        if (rotating) place_own_rows(entry);
      }
      (void)next_chunk;
      return staged_chunk_result<E, kHeadSlots, kCols>(a, s, m, hd, p.heads, entry, o);
    } else {
      (void)chunk;
      return chunk_result<E, kHeadSlots, kCols>(a, s, m, hd, p.g, p.heads, next_chunk, n_entries, cells, o);
    }
  };
  if (in_place) {
    fold_in_place<kHeadSlots, kCols>(a, s, reinterpret_cast<float*>(smem), m, p, hd, n_chunks, chunk_of);
    return;
  }
  for (int chunk = blockIdx.y; chunk < n_chunks; chunk += gridDim.y) {
    float o[kHeadSlots][kCols];
    const int next = chunk + static_cast<int>(gridDim.y);
    const bool any = chunk_of(chunk, next < n_chunks ? next : -1, o);
    if (any) __syncthreads();  // chunk_sum
    for (int h = group_thread(); h < p.heads; h += kThreads) {
      float* slot = slot_of(a, hd, p.t, p.h0 + h, chunk);
      slot[hd] = any ? s.chunk_max[h] : 0.0f;
      slot[hd + 1] = any ? s.chunk_sum[h] : 0.0f;  // 0: an empty chunk (a visible one has l_c >= 1)
    }
    if (any)
      for_each_owned<kHeadSlots, kCols>(
          m, p.heads, [&](int k, int c, int h, int col) { slot_of(a, hd, p.t, p.h0 + h, chunk)[col] = o[k][c]; });
    __syncthreads();  // chunk_max/chunk_sum are rewritten by the next chunk
  }
  // The last of the row's split blocks to finish folds every chunk (one launch, no fold kernel).
  // The loop's last barrier orders every thread's partials before thread 0 counts the block in,
  // and the count's release makes them visible with it (a barrier, then one release, as a split-K
  // semaphore publishes a CTA's partial tile); its acquire, then the barrier below, make the other
  // blocks' partials visible to the whole folding block. A fence in every thread instead, before
  // the count and after it, kept each block waiting on its own threads' stores. (Launching the
  // staged kernel in clusters of 8 slots and folding rows of at most 8 chunks through the
  // cluster's shared memory instead was slower: H200, one run, attention 281.6 -> 300.2 us a
  // llama3-8b b1 step, 205.2 -> 220.6 for SmolLM2.)
  __shared__ unsigned arrived;
  unsigned* arrivals = a.arrivals + static_cast<size_t>(p.t) * a.n_heads + p.block_h0;  // one per block
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> count(*arrivals);
    arrived = count.fetch_add(1u, ::cuda::memory_order_acq_rel);
  }
  __syncthreads();
  if (arrived != static_cast<unsigned>(min(n_chunks, static_cast<int>(gridDim.y))) - 1) return;
  fold_partials<kHeadSlots, kCols>(a, s, reinterpret_cast<float*>(smem), m, p, hd, n_chunks);
  if (threadIdx.x == 0) *arrivals = 0;  // ready for the next launch (graphs replay this one)
}

template <typename E, int kHeadSlots, int kCols, int kStagedGroups, int kHeadDim = 0>
auto prepared_kernel() {
  // Once per kernel: room for more dynamic shared memory than the default 48 KB (the staged
  // kernel's K and V rows, long head dims), up to what a block of this device may have.
  static const auto kernel = [] {
    const auto k = attention_kernel<E, kHeadSlots, kCols, kStagedGroups, kHeadDim>;
    int device = 0, most = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "shared memory per block");
    cudaFuncAttributes attributes{};
    check(cudaFuncGetAttributes(&attributes, k), "attention kernel attributes");
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               most - static_cast<int>(attributes.sharedSizeBytes)),  // its own `arrived` too
          "attention shared memory");
    return k;
  }();
  return kernel;
}

// The staged kernel for `heads` heads per block of head_dim hd: hd a constant for the f16 pools
// (the default) of head sizes 64 and 128 (SmolLM2, the Llamas).
template <typename E, int kGroups>
auto staged_kernel_of(int hd) {
  if constexpr (std::is_same_v<E, __half>) {
    if (hd == 64) return prepared_kernel<E, 1, 1, kGroups, 64>();
    if (hd == 128) return prepared_kernel<E, 1, 1, kGroups, 128>();
  }
  return prepared_kernel<E, 1, 1, kGroups>();
}

template <typename E>
auto staged_kernel(int heads, int hd) {
  return heads <= 4 ? staged_kernel_of<E, 4>(hd) : staged_kernel_of<E, kStagedMaxGroups>(hd);
}

// The kernel whose slot count is the smallest power of two that holds the block's heads. Head
// sizes 64 and 128 of f16 pools (SmolLM2, the Llamas) up to four slots (every decode shape of
// those models) are constants there, as in the staged kernel: H100, one run, attention_scaling
// (llama3-8b's layer), ms a step, 64 x 576 cells 0.1150 -> 0.1096, 64 x 2048 0.3183 -> 0.3045,
// 128 x 576 0.1899 -> 0.1834, 32 x 576 0.0661 -> 0.0638.
template <typename E, int kCols>
void launch_columns(const Args& args, dim3 grid, size_t smem, cudaStream_t stream) {
  auto launch = [&](auto kernel) { launch_kernel("attention kernel", kernel, grid, kThreads, smem, stream, args); };
  const int slots = head_slots(args.heads_per_block, args.head_dim);  // per thread, not split blocks
  if constexpr (std::is_same_v<E, __half> && kCols == 1) {
    if ((args.head_dim == 64 || args.head_dim == 128) && slots <= 4) {
      const bool h128 = args.head_dim == 128;
      if (slots <= 1)
        return launch(h128 ? prepared_kernel<E, 1, 1, 0, 128>() : prepared_kernel<E, 1, 1, 0, 64>());
      if (slots <= 2)
        return launch(h128 ? prepared_kernel<E, 2, 1, 0, 128>() : prepared_kernel<E, 2, 1, 0, 64>());
      return launch(h128 ? prepared_kernel<E, 4, 1, 0, 128>() : prepared_kernel<E, 4, 1, 0, 64>());
    }
  }
  if (slots <= 1)
    launch(prepared_kernel<E, 1, kCols, 0>());
  else if (slots <= 2)
    launch(prepared_kernel<E, 2, kCols, 0>());
  else if (slots <= 4)
    launch(prepared_kernel<E, 4, kCols, 0>());
  else if (slots <= 8)
    launch(prepared_kernel<E, 8, kCols, 0>());
  else if (slots <= 16)
    launch(prepared_kernel<E, 16, kCols, 0>());
  else if constexpr (kCols == 1)
    launch(prepared_kernel<E, 32, kCols, 0>());  // kAttentionMaxGroupDims / kThreads
  else
    fail(ErrorCode::Internal, "attention: ", slots, " head slots of two columns");  // heads <= 4096 / 256
}

// Shared memory of a block of `heads` heads, either kernel: theirs (staging_offset), then
// `stage_cells` V rows (the staged kernel: a whole chunk's) and a chunk's K rows (k_row_bytes
// apart).
int k_row_bytes(int hd, size_t elem) { return hd * static_cast<int>(elem) + 16; }
size_t k_stage_offset(int heads, int hd, int stage_cells, size_t elem) {
  return staging_offset(heads, hd) + static_cast<size_t>(stage_cells) * hd * elem;
}
size_t shared_bytes(int heads, int hd, int stage_cells, size_t elem) {
  return k_stage_offset(heads, hd, stage_cells, elem) + static_cast<size_t>(kChunk) * k_row_bytes(hd, elem);
}

// The staged kernel's heads per block and split slots for `rows` rows, or slots 0 where it does
// not serve: heads of one column per thread (head_dim <= kThreads), at most kStagedMaxGroups of
// them per KV head, and a grid of one wave with at least kStagedMinSlots slots. Fewer heads per
// block spread the work over more multiprocessors (H200, llama3-8b's shape, one row: 640 cells
// 9.0 us with a block per head, 10.7 per KV head) but fit fewer slots in the wave, which long
// contexts need (2048 cells: 17.6 us at 8 slots, 12.4 at 16): the fewest heads that reach
// kStagedTargetSlots, else the shape of most slots.
struct StagedShape {
  int heads = 0;
  int slots = 0;
};

template <typename E>
StagedShape staged_shape(int64_t rows, int n_heads, int group, int hd, int sm_count) {
  StagedShape best;
  if (column_count(hd) != 1 || group > kStagedMaxGroups) return best;
  for (int heads = 1; heads <= group && best.slots < kStagedTargetSlots; ++heads) {
    if (group % heads != 0) continue;
    const int per_sm = resident_blocks_per_sm(reinterpret_cast<const void*>(staged_kernel<E>(heads, hd)),
                                              kThreads * heads, shared_bytes(heads, hd, kChunk, sizeof(E)));
    const int64_t slots = int64_t{sm_count} * per_sm / (rows * n_heads / heads);
    if (slots > best.slots) best = {heads, static_cast<int>(std::min<int64_t>(slots, kMaxSlots))};
  }
  return best.slots >= kStagedMinSlots ? best : StagedShape{};
}

// How a launch cuts the work: the staged kernel's shape (slots 0: not staged), the heads of a
// block, the split slots per (row, heads) and the V rows staged at a time by the other kernels.
struct Plan {
  StagedShape staged;
  int heads_per_block = 1;
  int slots = 1;
  bool split = false;
  int stage_cells = kChunk;
  int64_t max_chunks = 0;
};

template <typename E>
Plan plan_of(int64_t rows, int n_heads, int group, int hd, const AttentionWorkspace& workspace) {
  Plan plan;
  plan.staged = staged_shape<E>(rows, n_heads, group, hd, workspace.sm_count);
  while (plan.stage_cells > 8 && static_cast<size_t>(plan.stage_cells) * hd * sizeof(E) > kStageBytes)
    plan.stage_cells /= 2;
  // Otherwise a block per (row, KV head): the group's query heads share each K and V row it
  // loads - unless a block per query head is what it takes to give each SM one, where the shorter
  // chain of a one-head block wins (llama3-8b's shape, one row, 640 cells: 18.0 us per head, 22.5
  // per KV head; 8 rows: 41.5 and 24.4). Few rows also split the chunks over blocks; many fold
  // them in place.
  plan.heads_per_block = plan.staged.slots > 0             ? plan.staged.heads
                         : rows * n_heads <= workspace.sm_count ? 1
                                                                : group;
  const int64_t base_blocks = rows * n_heads / plan.heads_per_block;
  plan.slots = plan.staged.slots > 0 ? plan.staged.slots
                                     : static_cast<int>(std::clamp<int64_t>(
                                           2 * int64_t{kBlocksPerSm} * workspace.sm_count / base_blocks, 1, kMaxSlots));
  plan.max_chunks = static_cast<int64_t>(workspace.capacity_floats / (static_cast<size_t>(rows) * n_heads * (hd + 2)));
  plan.split = plan.slots > 1 && plan.max_chunks >= 2 && workspace.partials != nullptr &&
               static_cast<size_t>(rows) * n_heads <= workspace.arrival_count;
  if (!plan.split) plan.slots = 1;
  return plan;
}

// Each block quantizes the outputs it writes: its heads must be whole blocks of the format.
bool plan_quantizes(const Plan& plan, int hd, ActivationFormat format) {
  return plan.heads_per_block * hd % activation_block_elems(format) == 0;
}

template <typename E>
void launch_typed(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                  const TensorRef& out, const AttentionWorkspace& workspace, const AttentionQuantizedOut* quantized,
                  cudaStream_t stream, const AttentionRope* rope) {
  const int hd = kv.head_dim;
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  const Plan plan = plan_of<E>(q.rows, n_heads, group, hd, workspace);
  if (quantized != nullptr && !plan_quantizes(plan, hd, quantized->format))
    fail(ErrorCode::Internal, "attention: quantized output of ", q.rows, " x ", q.cols, " not supported");
  const StagedShape staged = plan.staged;
  const int heads_per_block = plan.heads_per_block;
  // V rows staged at a time: the staged kernel stages a whole chunk.
  const int stage_cells = staged.slots > 0 ? kChunk : plan.stage_cells;
  const size_t smem = shared_bytes(heads_per_block, hd, stage_cells, sizeof(E));
  if (rope != nullptr && staged.slots == 0)
    fail(ErrorCode::Internal, "attention: the rope of ", q.rows, " rows folded in without the staged kernel");

  const Args args{static_cast<const float*>(q.data),
                  q.row_stride / sizeof(float),
                  static_cast<float*>(out.data),
                  out.row_stride / sizeof(float),
                  static_cast<const char*>(kv.k),
                  static_cast<const char*>(kv.v),
                  kv.row_stride,
                  n_heads,
                  hd,
                  group,
                  heads_per_block,
                  kv.window,
                  kv.page_size,
                  kv.cell_pos,
                  kv.page_rows,
                  kv.pages,
                  positions,
                  scale,
                  plan.split ? workspace.partials : nullptr,
                  workspace.arrivals,
                  static_cast<int>(std::min<int64_t>(plan.max_chunks, 1 << 30)),
                  stage_cells,
                  k_row_bytes(hd, sizeof(E)),
                  static_cast<int>(k_stage_offset(heads_per_block, hd, stage_cells, sizeof(E))),
                  // A row's step may have written its q.rows newest cells; with the rope folded in,
                  // its one new cell (this launch writes it).
                  rope != nullptr ? 1 : static_cast<int>(q.rows),
                  quantized != nullptr ? quantized->q : QuantizedActivations{},
                  quantized != nullptr ? quantized->format : ActivationFormat::Q8_0,
                  rope != nullptr ? *rope : AttentionRope{}};
  const dim3 grid(static_cast<unsigned>(n_heads / heads_per_block), static_cast<unsigned>(plan.slots),
                  static_cast<unsigned>(q.rows));
  if (staged.slots > 0) {
    launch_kernel("attention kernel", staged_kernel<E>(heads_per_block, hd), grid, kThreads * heads_per_block, smem,
                  stream, args);
    return;
  }
  if (column_count(hd) == 1)
    launch_columns<E, 1>(args, grid, smem, stream);
  else
    launch_columns<E, 2>(args, grid, smem, stream);
}

bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

// The output rows a launch with quantized output writes through shared memory: f32, the query's
// shape, 16-byte aligned (the plan's heads per block decide the rest: plan_quantizes).
bool output_quantizable(const TensorRef& q, const TensorRef& out) {
  return out.dtype == DType::F32 && out.rows == q.rows && out.cols == q.cols && aligned(out.data, 16) &&
         out.row_stride % 16 == 0 && q.rows <= 65535;
}

}  // namespace

size_t attention_partials_floats() {
  // Room for every head of a row of llama3-8b's shape (32 heads of 128) to split a 256k-cell
  // context, or 64 such rows a 4k one (34 MB); more rows or longer contexts fold in place.
  return size_t{32} * 2048 * (128 + 2);
}

// A split row needs two chunk slots of head_dim + 2 >= 10 floats per head.
size_t attention_arrival_count() { return attention_partials_floats() / 20; }

namespace {

// The pool's element type as a kernel parameter.
template <class F>
auto visit_pool_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    default: return f(float{});
  }
}

}  // namespace

bool attention_rope_supported(const TensorRef& q, const backend::PagedKv& kv, const AttentionRope& rope,
                              const AttentionWorkspace& workspace) {
  const int hd = kv.head_dim;
  if (!is_plain(kv.dtype) || hd <= 0 || kv.n_kv_heads <= 0 || q.cols % (int64_t{kv.n_kv_heads} * hd) != 0 ||
      q.rows > 65535 || rope.k_new == nullptr || rope.v_new == nullptr || rope.dst.cells == nullptr)
    return false;
  // The same layer's pool, whole heads rotating (pair partners within the head).
  if (rope.dst.k != kv.k || rope.dst.v != kv.v || rope.dst.row_stride != kv.row_stride || rope.dst.dtype != kv.dtype ||
      rope.angles.half * 2 != hd)
    return false;
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  return visit_pool_type(kv.dtype, [&](auto e) {
    return plan_of<decltype(e)>(q.rows, n_heads, group, hd, workspace).staged.slots > 0;
  });
}

bool attention_quantize_supported(const TensorRef& q, const backend::PagedKv& kv, const TensorRef& out,
                                  ActivationFormat format, const AttentionWorkspace& workspace) {
  const int hd = kv.head_dim;
  if (!is_plain(kv.dtype) || hd <= 0 || kv.n_kv_heads <= 0 || q.cols % (int64_t{kv.n_kv_heads} * hd) != 0) return false;
  if (!output_quantizable(q, out)) return false;
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  return visit_pool_type(kv.dtype, [&](auto e) {
    return plan_quantizes(plan_of<decltype(e)>(q.rows, n_heads, group, hd, workspace), hd, format);
  });
}

void launch_attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                      const TensorRef& out, const AttentionWorkspace& workspace, const AttentionQuantizedOut* quantized,
                      cudaStream_t stream, const AttentionRope* rope) {
  const int hd = kv.head_dim;
  if (!is_plain(kv.dtype)) fail(ErrorCode::Unsupported, "attention over a ", dtype_name(kv.dtype), " KV pool on CUDA");
  const size_t elem = dtype_info(kv.dtype).block_bytes;
  if (hd <= 0 || hd > kAttentionMaxHeadDim || hd % 8 != 0)
    fail(ErrorCode::Unsupported, "attention head size ", hd, " on CUDA (a multiple of 8, at most ",
         kAttentionMaxHeadDim, ")");
  if (kv.n_kv_heads <= 0 || q.cols % (int64_t{kv.n_kv_heads} * hd) != 0)
    fail(ErrorCode::Internal, "attention: ", q.cols, " query columns for ", kv.n_kv_heads, " KV heads of ", hd);
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  if (group * hd > kAttentionMaxGroupDims)
    fail(ErrorCode::Unsupported, "attention with ", group, " query heads of ", hd, " per KV head on CUDA");
  if (kv.page_size <= 0) fail(ErrorCode::Internal, "attention: page size ", kv.page_size);
  if (!aligned(kv.k, 16) || !aligned(kv.v, 16) || kv.row_stride % 16 != 0 || (hd * elem) % 16 != 0)
    fail(ErrorCode::Internal, "attention: KV rows are not 16-byte aligned");
  if (kv.row_stride > UINT32_MAX)
    fail(ErrorCode::Unsupported, "attention: KV pool rows of ", kv.row_stride, " bytes on CUDA (at most 4 GiB a row)");
  if (q.rows == 0) return;
  if (q.rows > 65535 || n_heads > 65535) fail(ErrorCode::Internal, "attention: grid too large");
  if (quantized != nullptr && !output_quantizable(q, out))  // launch_typed checks its plan's heads
    fail(ErrorCode::Internal, "attention: quantized output of ", q.rows, " x ", q.cols, " not supported");
  visit_pool_type(kv.dtype, [&](auto e) {
    launch_typed<decltype(e)>(q, kv, positions, scale, out, workspace, quantized, stream, rope);
  });
}

}  // namespace cellm::cuda
