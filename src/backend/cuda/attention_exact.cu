// Attention that computes what the CPU kernel (backend/cpu/attention_kernel.cpp) computes, bit
// for bit on CPUs with AVX2/FMA/F16C: the GPU's tokens then follow the CPU's (a last-bit
// difference in one attention output changes, now and then, a code of the next activation
// quantization, and from there the logits drift). Per (row, KV head), over the visible cells
// in page-list order:
//  1. scores: f16 pools dot q and K with eight running fused multiply-adds (element i to sum
//     i % 8) reduced as (s0+s4 + s2+s6) + (s1+s5 + s3+s7), the CPU's _mm256 dot; f32/bf16
//     pools sum unfused products in element order; then times `scale`;
//  2. max over the scores; e = exp(score - max) (glibc's expf, host_libm.cuh), summed in
//     double in cell order; inv = float(1 / sum);
//  3. out = sum over cells of (e * inv) * V in cell order: fused multiply-adds for f16 pools,
//     unfused for the others.
// One block per (row, KV head) walks the list in chunks of kChunk cells three times (max,
// sum, output), recomputing the scores instead of storing them; for the output the chunk's V
// rows pass through shared memory kStage cells at a time: the sequential parts are what
// the CPU order imposes, so long contexts are slower than the split kernel (attention.cu),
// which CELLM_CUDA_ATTENTION=split selects.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/host_libm.cuh"
#include "backend/cuda/plain_values.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = kThreads;  // cells per chunk: one per thread when scoring
constexpr int kStage = 32;        // cells whose V rows are staged in shared memory at a time

// Bytes of shared memory before the staged V rows (q, weights, max, inv, cells), rounded up
// so the staged rows are 16-byte aligned.
__host__ __device__ constexpr size_t staging_offset(int group, int hd) {
  return (sizeof(float) * (static_cast<size_t>(group) * hd + static_cast<size_t>(group) * kChunk + 2 * group) +
          sizeof(int) * kChunk + 15) / 16 * 16;
}

struct ExactArgs {
  const float* q;
  size_t q_stride;  // floats
  float* out;
  size_t out_stride;  // floats
  const char* k;
  const char* v;
  size_t row_stride;  // bytes per pool row
  int head_dim;
  int group;
  int window;
  int page_size;
  const int32_t* cell_pos;
  const int32_t* page_rows;
  const int32_t* pages;
  const int32_t* positions;
  float scale;
};

template <typename E>
__device__ __forceinline__ float value_at(const char* row, int i) {
  if constexpr (std::is_same_v<E, float>) return reinterpret_cast<const float*>(row)[i];
  else if constexpr (std::is_same_v<E, __half>) return __half2float(reinterpret_cast<const __half*>(row)[i]);
  else return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
}

// q . K of one cell, in the CPU's order (see the top of the file).
template <typename E>
__device__ float score_of(const float* q, const char* k_row, int hd, float scale) {
  if constexpr (std::is_same_v<E, __half>) {
    float acc[8] = {};
    for (int i = 0; i < hd; i += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(k_row + 2 * i);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 kv = unpack_16x2<false>(words[w]);
        acc[2 * w] = __fmaf_rn(q[i + 2 * w], kv.x, acc[2 * w]);
        acc[2 * w + 1] = __fmaf_rn(q[i + 2 * w + 1], kv.y, acc[2 * w + 1]);
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

// kItems: (head, dimension) outputs per thread, >= group * head_dim / kThreads.
template <typename E, int kItems>
__global__ void __launch_bounds__(kThreads) attention_exact_kernel(ExactArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int hd = a.head_dim, group = a.group;
  float* q_s = reinterpret_cast<float*>(smem);  // [group][hd]
  float* w_s = q_s + group * hd;                 // [group][kChunk]: scores, then e, then weights
  float* max_s = w_s + group * kChunk;           // [group]
  float* inv_s = max_s + group;                  // [group]
  int* cell_s = reinterpret_cast<int*>(inv_s + group);  // [kChunk]: pool row, or -1 if not visible
  uint4* v_s = reinterpret_cast<uint4*>(smem + staging_offset(group, hd));  // [kStage][V row]
  const int row_vecs = hd * static_cast<int>(sizeof(E)) / 16;              // 16-byte pieces per V row

  const int g = blockIdx.x, t = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t pos = a.positions[t];
  const int e_begin = a.page_rows[t];
  const int n_cells = (a.page_rows[t + 1] - e_begin) * a.page_size;
  const size_t head_offset = static_cast<size_t>(g) * hd * sizeof(E);
  const float* q_row = a.q + t * a.q_stride + static_cast<size_t>(g) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += kThreads) q_s[i] = q_row[i];
  for (int h = threadIdx.x; h < group; h += kThreads) max_s[h] = -INFINITY;
  __syncthreads();

  // This thread's cell of the chunk starting at `chunk` (-1: none or not visible).
  auto cell_at = [&](int chunk) {
    const int lin = chunk + threadIdx.x;
    if (lin >= n_cells) return -1;
    const int cell = a.pages[e_begin + lin / a.page_size] * a.page_size + lin % a.page_size;
    const int32_t cp = a.cell_pos[cell];
    return cp <= pos && (a.window == 0 || cp > pos - a.window) ? cell : -1;
  };

  auto k_row_of = [&](int cell) {
    return cell >= 0 ? a.k + static_cast<size_t>(cell) * a.row_stride + head_offset : a.k;
  };

  // 1. Max score per head (exact in any order).
  int any_visible = 0;
  for (int chunk = 0; chunk < n_cells; chunk += kChunk) {
    const int cell = cell_at(chunk);
    const char* k_row = k_row_of(cell);
    for (int h = 0; h < group; ++h)
      w_s[h * kChunk + threadIdx.x] = cell >= 0 ? score_of<E>(q_s + h * hd, k_row, hd, a.scale) : -INFINITY;
    any_visible |= __syncthreads_or(cell >= 0);
    for (int h = warp; h < group; h += kWarps) {
      float m = -INFINITY;
      for (int i = lane; i < kChunk; i += 32) m = fmaxf(m, w_s[h * kChunk + i]);
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      if (lane == 0) max_s[h] = fmaxf(max_s[h], m);
    }
    __syncthreads();
  }

  float* out_row = a.out + t * a.out_stride + static_cast<size_t>(g) * group * hd;
  if (any_visible == 0) {  // a padding row, or nothing visible: zeros, as on the CPU
    for (int i = threadIdx.x; i < group * hd; i += kThreads) out_row[i] = 0.0f;
    return;
  }

  // 2. Sum of exp(score - max) in double, cell by cell (thread h sums head h).
  double sum = 0.0;
  for (int chunk = 0; chunk < n_cells; chunk += kChunk) {
    const int cell = cell_at(chunk);
    const char* k_row = k_row_of(cell);
    for (int h = 0; h < group; ++h) {
      float e = 0.0f;  // adding +0 leaves the running sum unchanged
      if (cell >= 0) {
        const float d = __fsub_rn(score_of<E>(q_s + h * hd, k_row, hd, a.scale), max_s[h]);
        e = libm::expf_glibc(d);
      }
      w_s[h * kChunk + threadIdx.x] = e;
    }
    __syncthreads();
    if (threadIdx.x < group)
      for (int i = 0; i < kChunk; ++i) sum += static_cast<double>(w_s[threadIdx.x * kChunk + i]);
    __syncthreads();
  }
  if (threadIdx.x < group) inv_s[threadIdx.x] = static_cast<float>(1.0 / sum);
  __syncthreads();

  // 3. Weighted sum of V in cell order.
  float o[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) o[j] = 0.0f;
  for (int chunk = 0; chunk < n_cells; chunk += kChunk) {
    const int cell = cell_at(chunk);
    const char* k_row = k_row_of(cell);
    for (int h = 0; h < group; ++h) {
      float w = 0.0f;
      if (cell >= 0) {
        const float d = __fsub_rn(score_of<E>(q_s + h * hd, k_row, hd, a.scale), max_s[h]);
        w = __fmul_rn(libm::expf_glibc(d), inv_s[h]);
      }
      w_s[h * kChunk + threadIdx.x] = w;
    }
    cell_s[threadIdx.x] = cell;
    __syncthreads();
    const int n = min(kChunk, n_cells - chunk);
    for (int s0 = 0; s0 < n; s0 += kStage) {
      const int m = min(kStage, n - s0);
      // All threads copy these cells' V rows to shared memory first, their loads in flight
      // together: the ordered sum below would otherwise wait on one global load per cell.
      for (int i = threadIdx.x; i < m * row_vecs; i += kThreads) {
        const int pool_row = cell_s[s0 + i / row_vecs];
        if (pool_row >= 0)  // never read a cell that is not visible: free cells may hold anything
          v_s[i] = reinterpret_cast<const uint4*>(a.v + static_cast<size_t>(pool_row) * a.row_stride +
                                                  head_offset)[i % row_vecs];
      }
      __syncthreads();
      for (int c = 0; c < m; ++c) {
        if (cell_s[s0 + c] < 0) continue;
        const char* v_row = reinterpret_cast<const char*>(v_s + c * row_vecs);
#pragma unroll
        for (int j = 0; j < kItems; ++j) {
          const int item = threadIdx.x + kThreads * j;
          if (item < group * hd) {
            const float w = w_s[(item / hd) * kChunk + s0 + c];
            const float v = value_at<E>(v_row, item % hd);
            if constexpr (std::is_same_v<E, __half>) o[j] = __fmaf_rn(w, v, o[j]);
            else o[j] = __fadd_rn(o[j], __fmul_rn(w, v));
          }
        }
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int item = threadIdx.x + kThreads * j;
    if (item < group * hd) out_row[item] = o[j];
  }
}

template <typename E, int kItems>
void launch_items(const ExactArgs& args, dim3 grid, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(attention_exact_kernel<E, kItems>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "exact attention shared memory");
  attention_exact_kernel<E, kItems><<<grid, kThreads, smem, stream>>>(args);
}

template <typename E>
void launch_typed(const ExactArgs& args, dim3 grid, size_t smem, cudaStream_t stream) {
  const int items = (args.group * args.head_dim + kThreads - 1) / kThreads;
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

}  // namespace

bool attention_exact_supported(const TensorRef& q, const backend::PagedKv& kv) {
  const int hd = kv.head_dim;
  if (!is_plain(kv.dtype) || hd <= 0 || hd % 8 != 0 || kv.n_kv_heads <= 0 || kv.page_size <= 0) return false;
  if (q.cols % (int64_t{kv.n_kv_heads} * hd) != 0) return false;
  const int64_t group_dims = q.cols / kv.n_kv_heads;
  const size_t elem = dtype_info(kv.dtype).block_bytes;
  const size_t smem = staging_offset(static_cast<int>(group_dims / hd), hd) + static_cast<size_t>(kStage) * hd * elem;
  return group_dims <= kAttentionMaxGroupDims && group_dims / hd <= 64 && smem <= 160 * 1024 &&
         reinterpret_cast<uintptr_t>(kv.k) % 16 == 0 && reinterpret_cast<uintptr_t>(kv.v) % 16 == 0 &&
         kv.row_stride % 16 == 0 && (hd * elem) % 16 == 0;
}

void launch_attention_exact(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                            const TensorRef& out, cudaStream_t stream) {
  if (!attention_exact_supported(q, kv))
    fail(ErrorCode::Internal, "exact attention: unsupported operands (head size ", kv.head_dim, ", ",
         dtype_name(kv.dtype), ")");
  if (q.rows == 0) return;
  if (q.rows > 65535 || kv.n_kv_heads > 65535) fail(ErrorCode::Internal, "exact attention: grid too large");
  const int hd = kv.head_dim;
  const int group = static_cast<int>(q.cols / hd) / kv.n_kv_heads;
  const ExactArgs args{static_cast<const float*>(q.data),
                       q.row_stride / sizeof(float),
                       static_cast<float*>(out.data),
                       out.row_stride / sizeof(float),
                       static_cast<const char*>(kv.k),
                       static_cast<const char*>(kv.v),
                       kv.row_stride,
                       hd,
                       group,
                       kv.window,
                       kv.page_size,
                       kv.cell_pos,
                       kv.page_rows,
                       kv.pages,
                       positions,
                       scale};
  const dim3 grid(static_cast<unsigned>(kv.n_kv_heads), static_cast<unsigned>(q.rows));
  const size_t smem =
      staging_offset(group, hd) + static_cast<size_t>(kStage) * hd * dtype_info(kv.dtype).block_bytes;
  switch (kv.dtype) {
    case DType::F16: launch_typed<__half>(args, grid, smem, stream); break;
    case DType::BF16: launch_typed<__nv_bfloat16>(args, grid, smem, stream); break;
    default: launch_typed<float>(args, grid, smem, stream); break;
  }
  check_launch("exact attention kernel");
}

}  // namespace cellm::cuda
