// Attention over the page lists of kv/step_buffers.h, for decode and prefill rows alike.
//
// One block handles one query row, one KV head (with every query head that shares it) and one
// contiguous slice of the row's page list ("split"). It walks the slice in chunks of 256 cells:
//  1. the whole block applies the cell-table test (cell_pos <= pos, and > pos - window on
//     windowed layers) to the chunk at once and compacts the visible cells, in list order;
//  2. tiles of 32 visible cells are copied into shared memory with asynchronous copies
//     (cp.async), double-buffered: the next tile's K and V are in flight while this one is used;
//  3. a warp per query head scores the tile's cells (one lane per cell) and updates that
//     head's online softmax (running max and sum) with warp reductions;
//  4. each thread accumulates V for its (head, pair of dimensions).
// Cells that are not visible are never loaded (free cells and stale rows may hold anything,
// NaN included).
//
// Few rows (decode) would leave most of the GPU idle, so the page list is cut into up to
// kMaxSplits slices handled by separate blocks (flash-decoding); each writes its unnormalised
// output with its max and sum, and a second kernel merges the slices in a fixed order.
#include <algorithm>
#include <type_traits>

#include <cuda_pipeline.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "backend/cuda/reduce.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // cells per tile: one lane each when scoring
constexpr int kChunk = 256;  // cells tested for visibility at once (two per thread)
constexpr int kMaxSplits = 64;
constexpr int kMaxGroup = 64;   // query heads per KV head
constexpr int kRowPad = 16;     // bytes after each staged row: conflict-free 16-byte reads by cell
constexpr int kBlocksPerSm = 4;  // splitting stops once rows x heads x splits reach this many blocks per SM

struct AttentionArgs {
  const float* q;
  size_t q_stride;  // floats
  float* out;
  size_t out_stride;  // floats
  const char* k;
  const char* v;
  size_t row_stride;  // bytes per pool row
  int n_heads;
  int head_dim;
  int group;
  int window;
  int page_size;
  int vec_bytes;  // 16 when every K/V row start is 16-byte aligned, else 4
  const int32_t* cell_pos;
  const int32_t* page_rows;
  const int32_t* pages;
  const int32_t* positions;
  float scale;
  int n_splits;
  float* partials;  // [rows][n_heads][n_splits][head_dim + 2] when n_splits > 1
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// 16 staged bytes of K as floats: 8 halves / bf16s, or 4 floats.
template <typename E>
__device__ __forceinline__ void widen16(const uint4& raw, float (&out)[16 / sizeof(E)]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<E, float>) {
      out[i] = __uint_as_float(words[i]);
    } else {
      const float2 pair = unpack_16x2<std::is_same_v<E, __nv_bfloat16>>(words[i]);
      out[2 * i] = pair.x;
      out[2 * i + 1] = pair.y;
    }
  }
}

// Two consecutive staged values of V.
template <typename E>
__device__ __forceinline__ float2 load_pair(const unsigned char* p) {
  if constexpr (std::is_same_v<E, float>) return *reinterpret_cast<const float2*>(p);
  else return unpack_16x2<std::is_same_v<E, __nv_bfloat16>>(*reinterpret_cast<const uint32_t*>(p));
}

constexpr int kCellsPerWarp = kTile / kWarps;

// Starts the copies of the K and V rows of tile cells [0, n) (pool rows cells[c]) into one
// buffer: a warp per cell (warp, warp + kWarps, ...), lanes across the row.
__device__ __forceinline__ void issue_tile(const AttentionArgs& a, const int* cells, int n, int warp, int lane,
                                           int row_bytes, size_t head_offset, int staged_stride, unsigned char* k_s,
                                           unsigned char* v_s) {
#pragma unroll
  for (int j = 0; j < kCellsPerWarp; ++j) {
    const int c = warp + kWarps * j;
    if (c >= n) break;
    const size_t at = static_cast<size_t>(cells[c]) * a.row_stride + head_offset;
    for (int offset = lane * a.vec_bytes; offset < row_bytes; offset += 32 * a.vec_bytes) {
      __pipeline_memcpy_async(k_s + c * staged_stride + offset, a.k + at + offset, a.vec_bytes);
      __pipeline_memcpy_async(v_s + c * staged_stride + offset, a.v + at + offset, a.vec_bytes);
    }
  }
  __pipeline_commit();
}

// kPairs: (head, pair of dimensions) items per thread, >= group * head_dim / 2 / kThreads.
template <typename E, int kPairs>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int hd = a.head_dim, group = a.group, half_hd = hd / 2;
  const int row_bytes = hd * static_cast<int>(sizeof(E));
  const int staged_stride = row_bytes + kRowPad;
  const int staged_bytes = kTile * staged_stride;
  unsigned char* k_s = smem;                                              // [2][kTile][staged_stride]
  unsigned char* v_s = k_s + 2 * staged_bytes;                            // [2][kTile][staged_stride]
  float* q_s = reinterpret_cast<float*>(v_s + 2 * staged_bytes);          // [group][hd]
  float* p_s = q_s + group * hd;                                          // [group][kTile] probabilities
  float* m_s = p_s + group * kTile;                                       // running max per head
  float* l_s = m_s + group;                                               // running sum per head
  float* corr_s = l_s + group;                                            // this tile's rescale per head
  int* visible = reinterpret_cast<int*>(corr_s + group);                  // [kChunk] visible pool rows
  int* warp_counts = visible + kChunk;                                    // [2][kWarps]

  const int split = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t pos = a.positions[t];
  const int e_begin = a.page_rows[t], e_end = a.page_rows[t + 1];
  const int per_split = (e_end - e_begin + a.n_splits - 1) / a.n_splits;
  const int p_begin = e_begin + split * per_split;
  const int p_end = min(e_end, p_begin + per_split);
  const int n_cells = max(0, p_end - p_begin) * a.page_size;
  const size_t head_offset = static_cast<size_t>(g) * row_bytes;

  const float* q_row = a.q + t * a.q_stride + static_cast<size_t>(g) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += kThreads) q_s[i] = q_row[i];
  if (threadIdx.x < group) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  float2 acc[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) acc[j] = make_float2(0.0f, 0.0f);

  for (int chunk = 0; chunk < n_cells; chunk += kChunk) {
    // 1. Visibility of the chunk's cells, compacted in list order (cell index = j*128 + tid).
    int cell_of[2];
    bool keep[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int lin = chunk + j * kThreads + threadIdx.x;
      keep[j] = false;
      cell_of[j] = 0;
      if (lin < n_cells) {
        cell_of[j] = a.pages[p_begin + lin / a.page_size] * a.page_size + lin % a.page_size;
        const int32_t cp = a.cell_pos[cell_of[j]];
        keep[j] = cp <= pos && (a.window == 0 || cp > pos - a.window);
      }
    }
    unsigned ballots[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      ballots[j] = __ballot_sync(0xffffffffu, keep[j]);
      if (lane == 0) warp_counts[j * kWarps + warp] = __popc(ballots[j]);
    }
    __syncthreads();  // also: the previous chunk's last tile is fully consumed
    int n_visible = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      int base = n_visible;
      for (int w = 0; w < warp; ++w) base += warp_counts[j * kWarps + w];
      for (int w = 0; w < kWarps; ++w) n_visible += warp_counts[j * kWarps + w];
      if (keep[j]) visible[base + __popc(ballots[j] & ((1u << lane) - 1u))] = cell_of[j];
    }
    __syncthreads();

    // 2-4. Tiles of visible cells, the next one's copy in flight while this one is used.
    const int n_tiles = (n_visible + kTile - 1) / kTile;
    if (n_tiles > 0)
      issue_tile(a, visible, min(kTile, n_visible), warp, lane, row_bytes, head_offset, staged_stride, k_s, v_s);
    for (int tile = 0; tile < n_tiles; ++tile) {
      const int buf = tile % 2;
      const int tile_n = min(kTile, n_visible - tile * kTile);
      if (tile + 1 < n_tiles) {
        issue_tile(a, visible + (tile + 1) * kTile, min(kTile, n_visible - (tile + 1) * kTile), warp, lane, row_bytes,
                   head_offset, staged_stride, k_s + (1 - buf) * staged_bytes, v_s + (1 - buf) * staged_bytes);
        __pipeline_wait_prior(1);
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();
      const unsigned char* k_tile = k_s + buf * staged_bytes;
      const unsigned char* v_tile = v_s + buf * staged_bytes;

      // Scores and online softmax: a warp per head, a lane per cell.
      for (int h = warp; h < group; h += kWarps) {
        const int c = lane;
        const bool used = c < tile_n;
        float s = -INFINITY;
        if (used) {
          constexpr int kPer16 = 16 / static_cast<int>(sizeof(E));
          const unsigned char* k_row = k_tile + c * staged_stride;
          const float* qh = q_s + h * hd;
          float dot = 0.0f;
          for (int b = 0; b < row_bytes; b += 16) {
            float kf[kPer16];
            widen16<E>(*reinterpret_cast<const uint4*>(k_row + b), kf);
            const int d0 = b / static_cast<int>(sizeof(E));
#pragma unroll
            for (int i = 0; i < kPer16; ++i) dot = fmaf(qh[d0 + i], kf[i], dot);
          }
          s = dot * a.scale;
        }
        const float m_old = m_s[h];
        const float m_new = fmaxf(m_old, warp_max(s));
        const float p = used ? expf(s - m_new) : 0.0f;
        const float l_tile = warp_sum(p);
        p_s[h * kTile + c] = p;
        __syncwarp();
        if (lane == 0) {
          const float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
          l_s[h] = l_s[h] * corr + l_tile;
          m_s[h] = m_new;
          corr_s[h] = corr;
        }
      }
      __syncthreads();

      // V accumulation.
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int item = threadIdx.x + kThreads * j;
        if (item < group * half_hd) {
          const int h = item / half_hd, d2 = item % half_hd;
          const float corr = corr_s[h];
          float2 o = make_float2(acc[j].x * corr, acc[j].y * corr);
          const unsigned char* v_col = v_tile + 2 * d2 * static_cast<int>(sizeof(E));
          const float* ph = p_s + h * kTile;
          for (int c = 0; c < tile_n; ++c) {
            const float w = ph[c];
            const float2 v = load_pair<E>(v_col + c * staged_stride);
            o.x = fmaf(w, v.x, o.x);
            o.y = fmaf(w, v.y, o.y);
          }
          acc[j] = o;
        }
      }
      __syncthreads();  // before the buffer is refilled
    }
  }
  __syncthreads();  // m_s and l_s, also when the slice had no cells

#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int item = threadIdx.x + kThreads * j;
    if (item >= group * half_hd) continue;
    const int h = item / half_hd, d = 2 * (item % half_hd);
    const int head = g * group + h;
    if (a.n_splits == 1) {
      const float l = l_s[h];
      float* o = a.out + t * a.out_stride + static_cast<size_t>(head) * hd + d;
      o[0] = l > 0.0f ? acc[j].x / l : 0.0f;
      o[1] = l > 0.0f ? acc[j].y / l : 0.0f;
    } else {
      float* slot = a.partials + ((static_cast<size_t>(t) * a.n_heads + head) * a.n_splits + split) * (hd + 2);
      slot[d] = acc[j].x;
      slot[d + 1] = acc[j].y;
      if (d == 0) {
        slot[hd] = m_s[h];
        slot[hd + 1] = l_s[h];
      }
    }
  }
}

// Merges the splits of one (row, head): out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void __launch_bounds__(kAttentionMaxHeadDim) combine_kernel(const float* partials, int n_splits, int hd,
                                                                       float* out, size_t out_stride) {
  const int head = blockIdx.x, t = blockIdx.y, n_heads = gridDim.x;
  const int d = threadIdx.x;
  if (d >= hd) return;
  const float* base = partials + (static_cast<size_t>(t) * n_heads + head) * n_splits * (hd + 2);
  float m = -INFINITY;
  for (int s = 0; s < n_splits; ++s) {
    const float* slot = base + s * (hd + 2);
    if (slot[hd + 1] > 0.0f) m = fmaxf(m, slot[hd]);
  }
  float l = 0.0f, o = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float* slot = base + s * (hd + 2);
    if (slot[hd + 1] > 0.0f) {
      const float w = expf(slot[hd] - m);
      l = fmaf(slot[hd + 1], w, l);
      o = fmaf(slot[d], w, o);
    }
  }
  out[t * out_stride + static_cast<size_t>(head) * hd + d] = l > 0.0f ? o / l : 0.0f;
}

template <typename E, int kPairs>
void launch_with(const AttentionArgs& args, dim3 grid, size_t smem, cudaStream_t stream) {
  // Staged rows of f32 pools with large heads need more than the default 48 KB.
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(attention_kernel<E, kPairs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "attention shared memory");
  attention_kernel<E, kPairs><<<grid, kThreads, smem, stream>>>(args);
}

template <typename E>
void launch_typed(const AttentionArgs& args, dim3 grid, size_t smem, cudaStream_t stream) {
  const int pairs = (args.group * args.head_dim / 2 + kThreads - 1) / kThreads;
  if (pairs <= 1)
    launch_with<E, 1>(args, grid, smem, stream);
  else if (pairs <= 2)
    launch_with<E, 2>(args, grid, smem, stream);
  else if (pairs <= 4)
    launch_with<E, 4>(args, grid, smem, stream);
  else if (pairs <= 8)
    launch_with<E, 8>(args, grid, smem, stream);
  else
    launch_with<E, 16>(args, grid, smem, stream);
}

bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

size_t attention_partials_floats(int sm_count) {
  // Splits are used only while rows x KV heads x splits <= kBlocksPerSm x sm_count blocks.
  return static_cast<size_t>(kBlocksPerSm * sm_count) * (kAttentionMaxGroupDims + 2 * kMaxGroup);
}

void launch_attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                      const TensorRef& out, const AttentionWorkspace& workspace, cudaStream_t stream) {
  const int hd = kv.head_dim;
  if (!is_plain(kv.dtype)) fail(ErrorCode::Unsupported, "attention over a ", dtype_name(kv.dtype), " KV pool on CUDA");
  const size_t elem = dtype_info(kv.dtype).block_bytes;
  if (hd <= 0 || hd > kAttentionMaxHeadDim || (hd * elem) % 16 != 0)
    fail(ErrorCode::Unsupported, "attention head size ", hd, " on CUDA (at most ", kAttentionMaxHeadDim,
         ", rows of whole 16-byte chunks)");
  if (kv.n_kv_heads <= 0 || q.cols % (int64_t{kv.n_kv_heads} * hd) != 0)
    fail(ErrorCode::Internal, "attention: ", q.cols, " query columns for ", kv.n_kv_heads, " KV heads of ", hd);
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  if (group > kMaxGroup || group * hd > kAttentionMaxGroupDims)
    fail(ErrorCode::Unsupported, "attention with ", group, " query heads of ", hd, " per KV head on CUDA");
  if (kv.page_size <= 0) fail(ErrorCode::Internal, "attention: page size ", kv.page_size);
  if (!aligned(kv.k, 4) || !aligned(kv.v, 4) || kv.row_stride % 4 != 0)
    fail(ErrorCode::Internal, "attention: KV rows are not 4-byte aligned");
  if (q.rows == 0) return;
  if (q.rows > 65535 || kv.n_kv_heads > 65535) fail(ErrorCode::Internal, "attention: grid too large");
  const int vec_bytes = aligned(kv.k, 16) && aligned(kv.v, 16) && kv.row_stride % 16 == 0 ? 16 : 4;

  const int64_t base_blocks = q.rows * kv.n_kv_heads;
  int n_splits =
      static_cast<int>(std::clamp<int64_t>(kBlocksPerSm * workspace.sm_count / base_blocks, 1, kMaxSplits));
  while (n_splits > 1 && static_cast<size_t>(q.rows) * n_heads * n_splits * (hd + 2) > workspace.capacity_floats) --n_splits;

  const AttentionArgs args{static_cast<const float*>(q.data),
                           q.row_stride / sizeof(float),
                           static_cast<float*>(out.data),
                           out.row_stride / sizeof(float),
                           static_cast<const char*>(kv.k),
                           static_cast<const char*>(kv.v),
                           kv.row_stride,
                           n_heads,
                           hd,
                           group,
                           kv.window,
                           kv.page_size,
                           vec_bytes,
                           kv.cell_pos,
                           kv.page_rows,
                           kv.pages,
                           positions,
                           scale,
                           n_splits,
                           workspace.partials};
  const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>(kv.n_kv_heads), static_cast<unsigned>(q.rows));
  const size_t smem = 4 * kTile * (hd * elem + kRowPad) +
                      sizeof(float) * (static_cast<size_t>(group) * hd + static_cast<size_t>(group) * kTile + 3 * group) +
                      sizeof(int) * (kChunk + 2 * kWarps);
  switch (kv.dtype) {
    case DType::F16: launch_typed<__half>(args, grid, smem, stream); break;
    case DType::BF16: launch_typed<__nv_bfloat16>(args, grid, smem, stream); break;
    default: launch_typed<float>(args, grid, smem, stream); break;
  }
  check_launch("attention kernel");
  if (n_splits > 1) {
    combine_kernel<<<dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(q.rows)), kAttentionMaxHeadDim, 0,
                     stream>>>(workspace.partials, n_splits, hd, static_cast<float*>(out.data),
                               out.row_stride / sizeof(float));
    check_launch("attention combine kernel");
  }
}

}  // namespace cellm::cuda
