// Attention over the page lists of kv/step_buffers.h, for decode and prefill rows alike, in the
// order backend/attention_order.h defines: the CPU kernel's bits (where the CPU's f16 dot uses
// AVX2/FMA, and always for f32/bf16 pools), so GPU and CPU tokens agree.
//
// The order makes each chunk of kAttentionChunk list entries an independent piece of work
// (scores, max, exponentials, sums) and only the fold of the chunks sequential, so a long
// context splits across blocks without changing a bit:
//  - split: block x of a (row, heads) takes chunks x, x + slots, ... and writes each chunk's
//    (m_c, l_c, o_c) to the workspace; the last of those blocks to finish (an arrival counter
//    per (row, heads) in the workspace) folds them in chunk order. For decode, where rows x
//    heads alone would leave the GPU idle.
//  - in place: one block per (row, heads) folds its chunks itself, in order. For many rows, and
//    for a row with more chunks than the workspace holds per row (block 0 of its split blocks
//    does it, the others return).
// Within a chunk a thread takes one list entry (visibility, then one score per head); the V rows
// of the visible cells come to shared memory with asynchronous copies (the first stage while the
// scores are computed) and each thread sums, cell by cell, its (head, dimension) outputs.
// Cells that are not visible are never loaded (free cells and stale rows may hold anything,
// NaN included).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backend/attention_order.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/host_libm.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kChunk = backend::kAttentionChunk;
constexpr int kThreads = kChunk;  // one list entry per thread
constexpr int kWarps = kThreads / 32;
constexpr int kStageBytes = 32 * 1024;  // V rows staged in shared memory at a time
constexpr int kMaxSlots = 64;     // split blocks per (row, heads)
constexpr int kBlocksPerSm = 4;   // splitting stops once the grid reaches this many blocks per SM

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
};

// Bytes of shared memory before the staged V rows, rounded up so they are 16-byte aligned.
__host__ __device__ constexpr size_t staging_offset(int heads, int hd) {
  return (sizeof(float) * (static_cast<size_t>(heads) * hd + static_cast<size_t>(heads) * kChunk + 4 * heads) +
          sizeof(int) * kChunk + 15) / 16 * 16;
}

template <typename E>
__device__ __forceinline__ float value_at(const char* row, int i) {
  if constexpr (std::is_same_v<E, float>) return reinterpret_cast<const float*>(row)[i];
  else if constexpr (std::is_same_v<E, __half>) return __half2float(reinterpret_cast<const __half*>(row)[i]);
  else return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
}

// s = q . K * scale of one cell, in the defined order (head_dim a multiple of 8).
template <typename E>
__device__ __forceinline__ float score_of(const float* q, const char* k_row, int hd, float scale) {
  if constexpr (std::is_same_v<E, __half>) {
    float acc[8] = {};
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
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const float2 kv = unpack_16x2<false>(words[w]);
          acc[2 * w] = __fmaf_rn(q[i + 2 * w], kv.x, acc[2 * w]);
          acc[2 * w + 1] = __fmaf_rn(q[i + 2 * w + 1], kv.y, acc[2 * w + 1]);
        }
      }
    }
    float s[4];
#pragma unroll
    for (int l = 0; l < 4; ++l) s[l] = __fadd_rn(acc[l], acc[l + 4]);
    return __fmul_rn(__fadd_rn(__fadd_rn(s[0], s[2]), __fadd_rn(s[1], s[3])), scale);
  } else {
    float dot = 0.0f;
    for (int i = 0; i < hd; ++i) dot = __fadd_rn(dot, __fmul_rn(q[i], value_at<E>(k_row, i)));
    return __fmul_rn(dot, scale);
  }
}

// Shared memory of a block: the block's query heads, the chunk's weights, per-head scalars, the
// chunk's cells and the staged V rows.
struct Shared {
  float* q;          // [heads][hd]
  float* w;          // [heads][kChunk]: scores, then e_j
  float* chunk_max;  // [heads] m_c
  float* chunk_sum;  // [heads] l_c
  float* max;        // [heads] running m (in place)
  float* sum;        // [heads] running l (in place)
  int* cell;         // [kChunk] pool row of each entry, -1 if absent or not visible
  uint4* v;          // [stage_cells][V row]
};

__device__ __forceinline__ Shared carve(unsigned char* smem, int heads, int hd) {
  Shared s;
  s.q = reinterpret_cast<float*>(smem);
  s.w = s.q + heads * hd;
  s.chunk_max = s.w + heads * kChunk;
  s.chunk_sum = s.chunk_max + heads;
  s.max = s.chunk_sum + heads;
  s.sum = s.max + heads;
  s.cell = reinterpret_cast<int*>(s.sum + heads);
  s.v = reinterpret_cast<uint4*>(smem + staging_offset(heads, hd));
  return s;
}

// One chunk of row t for the block's heads (first: h0 within KV head g): chunk_max, chunk_sum in
// shared memory and o_c in o[] (item j of this thread is (head, dim) = threadIdx.x + kThreads j).
// Returns false, block-uniformly, when no cell of the chunk is visible.
template <typename E, int kItems>
__device__ __forceinline__ bool chunk_result(const Args& a, const Shared& s, int t, int g, int heads, int chunk, int n_entries,
                             float (&o)[kItems]) {
  const int hd = a.head_dim;
  const int e_begin = a.page_rows[t];
  const int32_t pos = a.positions[t];
  const size_t head_offset = static_cast<size_t>(g) * hd * sizeof(E);
  const int lin = chunk * kChunk + threadIdx.x;
  int cell = -1;
  if (lin < n_entries) {
    const int c = a.pages[e_begin + lin / a.page_size] * a.page_size + lin % a.page_size;
    const int32_t cp = a.cell_pos[c];
    if (cp <= pos && (a.window == 0 || cp > pos - a.window)) cell = c;
  }
  s.cell[threadIdx.x] = cell;
  if (__syncthreads_or(cell >= 0) == 0) return false;

  // The first V stage starts to arrive while the scores are computed.
  const int row_vecs = hd * static_cast<int>(sizeof(E)) / 16;  // 16-byte pieces per V row
  auto stage_v = [&](int s0) {
    const int n = min(a.stage_cells, kChunk - s0);
    for (int i = threadIdx.x; i < n * row_vecs; i += kThreads) {
      const int pool_row = s.cell[s0 + i / row_vecs];
      if (pool_row >= 0)
        exact::cp_async16(s.v + i, a.v + static_cast<size_t>(pool_row) * a.row_stride + head_offset + 16 * (i % row_vecs));
      else
        s.v[i] = make_uint4(0, 0, 0, 0);  // weight 0 times +0 adds nothing: no branch per cell below
    }
    exact::cp_async_commit();
  };
  stage_v(0);

  const char* k_row = a.k + static_cast<size_t>(cell < 0 ? 0 : cell) * a.row_stride + head_offset;
  for (int h = 0; h < heads; ++h)
    s.w[h * kChunk + threadIdx.x] = cell >= 0 ? score_of<E>(s.q + h * hd, k_row, hd, a.scale) : -INFINITY;
  __syncthreads();

  // m_c per head (exact in any order), then e_j = expf(s_j - m_c), 0 where not visible.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int h = warp; h < heads; h += kWarps) {
    float m = -INFINITY;
    for (int i = lane; i < kChunk; i += 32) m = fmaxf(m, s.w[h * kChunk + i]);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (lane == 0) s.chunk_max[h] = m;
  }
  __syncthreads();
  for (int h = 0; h < heads; ++h) {
    float& w = s.w[h * kChunk + threadIdx.x];
    w = cell >= 0 ? libm::expf_glibc(__fsub_rn(w, s.chunk_max[h])) : 0.0f;
  }
  __syncthreads();
  // l_c: thread h sums head h's e_j in cell order (adding the zeros of absent cells changes nothing).
  if (threadIdx.x < heads) {
    float l = 0.0f;
#pragma unroll 8
    for (int i = 0; i < kChunk; ++i) l = __fadd_rn(l, s.w[threadIdx.x * kChunk + i]);
    s.chunk_sum[threadIdx.x] = l;
  }

  // o_c: the visible cells' V rows, stage by stage, summed in cell order. Each item's weight row
  // and column are found once, not per cell (an integer division per cell and item cost ~20 us
  // per decode step of llama3-8b); items past the block's outputs compute on row 0, unstored.
  const float* w_of[kItems];
  int col_of[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int item = threadIdx.x + kThreads * j;
    const bool live = item < heads * hd;
    w_of[j] = s.w + (live ? item / hd : 0) * kChunk;
    col_of[j] = live ? item % hd : 0;
    o[j] = 0.0f;
  }
  for (int s0 = 0; s0 < kChunk; s0 += a.stage_cells) {
    exact::cp_async_wait<0>();
    __syncthreads();
    const int n = min(a.stage_cells, kChunk - s0);
    // Cells that are not visible have e = 0 and a zeroed staged row: fma(0, 0, o) is o, the
    // same bits as skipping them, and the loop needs no branch (its loads batch up).
#pragma unroll 8
    for (int c = 0; c < n; ++c) {
      const char* v_row = reinterpret_cast<const char*>(s.v) + static_cast<size_t>(c) * hd * sizeof(E);
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const float w = w_of[j][s0 + c];
        const float v = value_at<E>(v_row, col_of[j]);
        if constexpr (std::is_same_v<E, __half>) o[j] = __fmaf_rn(w, v, o[j]);
        else o[j] = __fadd_rn(o[j], __fmul_rn(w, v));
      }
    }
    __syncthreads();  // before the staging buffer and, after the last stage, s.cell are reused
    if (s0 + a.stage_cells < kChunk) stage_v(s0 + a.stage_cells);
  }
  return true;
}

// The block's (row t, KV head g, first head h0 of `heads`): blockIdx.z, and blockIdx.y split
// into KV head and part.
struct Place {
  int t, g, h0, heads;
};

__device__ __forceinline__ Place place_of(const Args& a) {
  const int parts = a.group / a.heads_per_block;
  Place p;
  p.t = blockIdx.z;
  p.g = blockIdx.y / parts;
  p.h0 = p.g * a.group + (blockIdx.y % parts) * a.heads_per_block;
  p.heads = a.heads_per_block;
  return p;
}

// Folding a chunk (max m_c) into the running state (max m), attention_order.h: m' = max(m, m_c),
// v = v * expf(m - m') + v_c * expf(m_c - m') for the sum and every output.
struct FoldStep {
  float a, b, m;  // expf(m - m'), expf(m_c - m'), m'
  __device__ float operator()(float v, float v_c) const { return __fadd_rn(__fmul_rn(v, a), __fmul_rn(v_c, b)); }
};
__device__ __forceinline__ FoldStep fold_step(float m, float m_c) {
  const float m_new = fmaxf(m, m_c);
  return {libm::expf_glibc(__fsub_rn(m, m_new)), libm::expf_glibc(__fsub_rn(m_c, m_new)), m_new};
}

// Chunks folded in order by this block; writes the row's outputs for its heads.
template <typename E, int kItems>
__device__ __forceinline__ void fold_in_place(const Args& a, const Shared& s, const Place& p, int n_chunks, int n_entries) {
  const int hd = a.head_dim;
  float acc[kItems], o[kItems];
  bool started = false;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    if (!chunk_result<E, kItems>(a, s, p.t, p.g, p.heads, chunk, n_entries, o)) continue;
    __syncthreads();  // chunk_sum
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int item = threadIdx.x + kThreads * j;
      if (item >= p.heads * hd) continue;
      const int h = item / hd;
      if (!started) {
        acc[j] = o[j];
      } else {
        acc[j] = fold_step(s.max[h], s.chunk_max[h])(acc[j], o[j]);
      }
    }
    __syncthreads();  // every thread has read s.max before it moves on
    if (threadIdx.x < p.heads) {
      const int h = threadIdx.x;
      if (!started) {
        s.max[h] = s.chunk_max[h];
        s.sum[h] = s.chunk_sum[h];
      } else {
        const FoldStep f = fold_step(s.max[h], s.chunk_max[h]);
        s.sum[h] = f(s.sum[h], s.chunk_sum[h]);
        s.max[h] = f.m;
      }
    }
    started = true;
    __syncthreads();
  }
  float* out_row = a.out + p.t * a.out_stride + static_cast<size_t>(p.h0) * hd;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int item = threadIdx.x + kThreads * j;
    if (item < p.heads * hd) out_row[item] = started ? __fdiv_rn(acc[j], s.sum[item / hd]) : 0.0f;
  }
}

// Output (row t, head, dimension d) from the workspace: the row's chunks folded in order
// (attention_order.h). Chunks with l_c = 0 saw no visible cell. Reads with __ldcg: other
// blocks wrote them.
__device__ float fold_partials(const Args& a, int t, int head, int d, int n_chunks) {
  const int hd = a.head_dim;
  const float* base = a.partials + (static_cast<size_t>(t) * a.n_heads + head) * a.max_chunks * (hd + 2);
  bool started = false;
  float m = 0.0f, l = 0.0f, o = 0.0f;
  for (int c = 0; c < n_chunks; ++c) {
    const float* slot = base + static_cast<size_t>(c) * (hd + 2);
    const float l_c = __ldcg(slot + hd + 1);
    if (l_c == 0.0f) continue;
    const float m_c = __ldcg(slot + hd), o_c = __ldcg(slot + d);
    if (!started) {
      m = m_c, l = l_c, o = o_c, started = true;
      continue;
    }
    const FoldStep f = fold_step(m, m_c);
    l = f(l, l_c);
    o = f(o, o_c);
    m = f.m;
  }
  return started ? __fdiv_rn(o, l) : 0.0f;
}

// kItems: (head, dimension) outputs per thread, >= heads_per_block * head_dim / kThreads.
template <typename E, int kItems>
__global__ void __launch_bounds__(kThreads) attention_kernel(Args a) {
  allow_next_kernel();
  wait_for_inputs();
  extern __shared__ __align__(16) unsigned char smem[];
  const int hd = a.head_dim;
  const Place p = place_of(a);
  const Shared s = carve(smem, p.heads, hd);
  const int n_entries = (a.page_rows[p.t + 1] - a.page_rows[p.t]) * a.page_size;
  const int n_chunks = (n_entries + kChunk - 1) / kChunk;
  // One chunk (or none) needs no fold: block 0 writes the output itself.
  const bool in_place = a.partials == nullptr || n_chunks > a.max_chunks || n_chunks <= 1;
  if (in_place && blockIdx.x != 0) return;
  if (!in_place && static_cast<int>(blockIdx.x) >= n_chunks) return;

  const float* q_row = a.q + p.t * a.q_stride + static_cast<size_t>(p.h0) * hd;
  for (int i = threadIdx.x; i < p.heads * hd; i += kThreads) s.q[i] = q_row[i];
  __syncthreads();
  if (in_place) {
    fold_in_place<E, kItems>(a, s, p, n_chunks, n_entries);
    return;
  }
  for (int chunk = blockIdx.x; chunk < n_chunks; chunk += gridDim.x) {
    float o[kItems];
    const bool any = chunk_result<E, kItems>(a, s, p.t, p.g, p.heads, chunk, n_entries, o);
    if (any) __syncthreads();  // chunk_sum
    for (int h = 0; h < p.heads; ++h) {
      float* slot = a.partials + ((static_cast<size_t>(p.t) * a.n_heads + p.h0 + h) * a.max_chunks + chunk) * (hd + 2);
      if (threadIdx.x == 0) {
        slot[hd] = any ? s.chunk_max[h] : 0.0f;
        slot[hd + 1] = any ? s.chunk_sum[h] : 0.0f;  // 0: an empty chunk (a visible one has l_c >= 1)
      }
    }
    if (any) {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        const int item = threadIdx.x + kThreads * j;
        if (item >= p.heads * hd) continue;
        a.partials[((static_cast<size_t>(p.t) * a.n_heads + p.h0 + item / hd) * a.max_chunks + chunk) * (hd + 2) +
                   item % hd] = o[j];
      }
    }
    __syncthreads();  // chunk_max/chunk_sum are rewritten by the next chunk
  }
  // The last of the row's split blocks to finish folds every chunk (one launch, no fold kernel):
  // each block's partials are made visible before it counts itself in.
  __shared__ unsigned arrived;
  __threadfence();
  __syncthreads();
  unsigned* arrivals = a.arrivals + static_cast<size_t>(p.t) * a.n_heads + p.h0;
  if (threadIdx.x == 0) arrived = atomicAdd(arrivals, 1u);
  __syncthreads();
  if (arrived != static_cast<unsigned>(min(n_chunks, static_cast<int>(gridDim.x))) - 1) return;
  __threadfence();
  float* out_row = a.out + p.t * a.out_stride + static_cast<size_t>(p.h0) * hd;
  for (int item = threadIdx.x; item < p.heads * hd; item += kThreads)
    out_row[item] = fold_partials(a, p.t, p.h0 + item / hd, item % hd, n_chunks);
  if (threadIdx.x == 0) *arrivals = 0;  // ready for the next launch (graphs replay this one)
}

template <typename E, int kItems>
void launch_items(const Args& args, dim3 grid, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(attention_kernel<E, kItems>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "attention shared memory");
  launch_kernel("attention kernel", attention_kernel<E, kItems>, grid, kThreads, smem, stream, args);
}

template <typename E>
void launch_typed(const Args& args, dim3 grid, size_t smem, cudaStream_t stream) {
  const int items = (args.heads_per_block * args.head_dim + kThreads - 1) / kThreads;
  if (items <= 1)
    launch_items<E, 1>(args, grid, smem, stream);
  else if (items <= 2)
    launch_items<E, 2>(args, grid, smem, stream);
  else if (items <= 4)
    launch_items<E, 4>(args, grid, smem, stream);
  else if (items <= 8)
    launch_items<E, 8>(args, grid, smem, stream);
  else if (items <= 16)
    launch_items<E, 16>(args, grid, smem, stream);
  else
    launch_items<E, 32>(args, grid, smem, stream);
}

bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

size_t attention_partials_floats() {
  // Room for every head of a row of llama3-8b's shape (32 heads of 128) to split a 256k-cell
  // context, or 64 such rows a 4k one (34 MB); more rows or longer contexts fold in place.
  return size_t{32} * 2048 * (128 + 2);
}

// A split row needs two chunk slots of head_dim + 2 >= 10 floats per head.
size_t attention_arrival_count() { return attention_partials_floats() / 20; }

void launch_attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                      const TensorRef& out, const AttentionWorkspace& workspace, cudaStream_t stream) {
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
  if (q.rows == 0) return;
  if (q.rows > 65535 || n_heads > 65535) fail(ErrorCode::Internal, "attention: grid too large");

  int stage_cells = kChunk;
  while (stage_cells > 8 && static_cast<size_t>(stage_cells) * hd * elem > kStageBytes) stage_cells /= 2;

  // Few rows: a block per query head and split chunks; many: a block per KV head, in place.
  const int64_t target_blocks = int64_t{kBlocksPerSm} * workspace.sm_count;
  const bool few_rows = q.rows * kv.n_kv_heads < target_blocks;
  const int heads_per_block = few_rows ? 1 : group;
  const int64_t base_blocks = q.rows * n_heads / heads_per_block;
  int slots = static_cast<int>(std::clamp<int64_t>(2 * target_blocks / base_blocks, 1, kMaxSlots));
  const int64_t max_chunks =
      static_cast<int64_t>(workspace.capacity_floats / (static_cast<size_t>(q.rows) * n_heads * (hd + 2)));
  const bool split = slots > 1 && max_chunks >= 2 && workspace.partials != nullptr &&
                     static_cast<size_t>(q.rows) * n_heads <= workspace.arrival_count;
  if (!split) slots = 1;

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
                  split ? workspace.partials : nullptr,
                  workspace.arrivals,
                  static_cast<int>(std::min<int64_t>(max_chunks, 1 << 30)),
                  stage_cells};
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(n_heads / heads_per_block),
                  static_cast<unsigned>(q.rows));
  const size_t smem = staging_offset(heads_per_block, hd) + static_cast<size_t>(stage_cells) * hd * elem;
  switch (kv.dtype) {
    case DType::F16: launch_typed<__half>(args, grid, smem, stream); break;
    case DType::BF16: launch_typed<__nv_bfloat16>(args, grid, smem, stream); break;
    default: launch_typed<float>(args, grid, smem, stream); break;
  }
}

}  // namespace cellm::cuda
