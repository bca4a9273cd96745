// Attention over the cells of the off-graph cache, in the order backend/attention_order.h
// defines (the CUDA kernel computes the same bits). Each query row walks only its own page list
// (cost follows what the row can see, not the pool), keeps the cells that pass the causal and
// window test, and takes them a chunk at a time: scores, exponentials against the chunk's max,
// the weighted sum of V in list order, folded into the running result. Heads that share a KV
// head are processed together so each K and V row is loaded once per group; decode rows, too
// few to keep every thread busy that way, split their groups. Cells are walked through rows
// prefetched a few cells ahead.
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/attention_order.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/f16_table.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/exp_glibc.h"
#include "core/half.h"

namespace cellm::cpu {
namespace {

// One K row against one query head, and one weighted V row added to an output head, for each
// pool dtype (rows are f16, bf16 or f32 elements).
using DotFn = float (*)(const float* q, const void* k, int n);
using AxpyFn = void (*)(float a, const void* v, float* y, int n);

// Element i of a pool row, widened to float.
float f16_at(const void* row, int i) { return f16_to_f32(static_cast<const uint16_t*>(row)[i]); }
float bf16_at(const void* row, int i) { return bf16_to_fp32(static_cast<const uint16_t*>(row)[i]); }
float f32_at(const void* row, int i) { return static_cast<const float*>(row)[i]; }

// Products added in element order, unfused (attention_order.h for f32/bf16 pools; the
// portable f16 path).
template <float (*kAt)(const void*, int)>
float dot_each(const float* q, const void* k, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += q[i] * kAt(k, i);
  return sum;
}

template <float (*kAt)(const void*, int)>
void axpy_each(float a, const void* v, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * kAt(v, i);
}

// The rows of one KV head over a task's cells: cell c's row starts at base + c * stride and
// holds `bytes` bytes.
struct CellRows {
  const char* base;
  size_t stride;
  size_t bytes;
  const int32_t* cells;
  const char* at(size_t j) const { return base + static_cast<size_t>(cells[j]) * stride; }
};

// Consecutive cells lie a whole cell row (every layer's K and V) apart, beyond what the
// hardware prefetcher follows: rows are fetched this many cells ahead.
constexpr size_t kAhead = 6;

inline void prefetch_row(const void* row, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(row) + b);
}

// scores[h][j] = q_h . k_j * scale for the task's `heads` heads (q: their rows, one after the
// other) and every cell j. Always inlined into its callers, so that an ISA-specific caller gets
// kDot inlined too (scores_f16_avx2).
template <DotFn kDot>
[[gnu::always_inline]] inline void scores_loop(const float* q, int heads, int hd, const CellRows& k, size_t n,
                                               float scale, float* scores) {
  const size_t bytes = k.bytes;
  for (size_t j = 0; j < std::min(n, kAhead); ++j) prefetch_row(k.at(j), bytes);
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) prefetch_row(k.at(j + kAhead), bytes);
    const char* kr = k.at(j);
    for (int h = 0; h < heads; ++h) scores[static_cast<size_t>(h) * n + j] = kDot(q + static_cast<size_t>(h) * hd, kr, hd) * scale;
  }
}

template <DotFn kDot>
void scores_each_cell(const float* q, int heads, int hd, const CellRows& k, size_t n, float scale, float* scores) {
  scores_loop<kDot>(q, heads, hd, k, n, scale, scores);
}

// out[h] = sum over cells j, in order, of w[h][j] * v_j, one V row added to every head at a time.
template <AxpyFn kAxpy>
void values_each_cell(const float* w, int heads, int hd, const CellRows& v, size_t n, float* out) {
  std::fill(out, out + static_cast<size_t>(heads) * hd, 0.0f);
  for (size_t j = 0; j < std::min(n, kAhead); ++j) prefetch_row(v.at(j), v.bytes);
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) prefetch_row(v.at(j + kAhead), v.bytes);
    const char* vr = v.at(j);
    for (int h = 0; h < heads; ++h) kAxpy(w[static_cast<size_t>(h) * n + j], vr, out + static_cast<size_t>(h) * hd, hd);
  }
}

#if defined(__x86_64__)
// q . k over n elements, n a multiple of 8: eight lane sums of fused multiply-adds, folded.
__attribute__((target("avx2,fma,f16c"))) inline float dot_f16_avx2_x8(const float* q, const void* k, int n) {
  const auto* kh = static_cast<const uint16_t*>(k);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kh + i)));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Any n: the multiple of 8 as above, the rest added one by one.
__attribute__((target("avx2,fma,f16c"))) float dot_f16_avx2(const float* q, const void* k, int n) {
  const int whole = n / 8 * 8;
  float sum = dot_f16_avx2_x8(q, k, whole);
  const auto* kh = static_cast<const uint16_t*>(k);
  for (int i = whole; i < n; ++i) sum += q[i] * fp16_to_fp32(kh[i]);
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) void axpy_f16_avx2(float a, const void* v, float* y, int n) {
  const auto* vh = static_cast<const uint16_t*>(v);
  const __m256 av = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vh + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, vv, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * fp16_to_fp32(vh[i]);
}

// scores_each_cell<dot_f16_avx2> for head dims that are multiples of 8, with the dot inlined
// (a call, or the tail loop, per cell and head costs ~4% of a long prefill).
__attribute__((target("avx2,fma,f16c"))) void scores_f16_avx2(const float* q, int heads, int hd, const CellRows& k,
                                                               size_t n, float scale, float* scores) {
  scores_loop<dot_f16_avx2_x8>(q, heads, hd, k, n, scale, scores);
}

// out[h][d0, d0 + 8 kBlocks) = sum over cells j, in order, of w[h][j] * v_j: the fused
// multiply-add of axpy_f16_avx2 per element (the same bits), accumulated in registers across
// all cells instead of loaded and stored back at each one.
template <int kBlocks>
__attribute__((target("avx2,fma,f16c"))) void values_block_f16_avx2(const float* w, size_t n, const CellRows& v, int d0,
                                                                     float* out) {
  __m256 acc[kBlocks];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) prefetch_row(v.at(j + kAhead) + 2 * d0, kBlocks * 16);
    const auto* vr = reinterpret_cast<const uint16_t*>(v.at(j)) + d0;
    const __m256 a = _mm256_set1_ps(w[j]);
    for (int b = 0; b < kBlocks; ++b)
      acc[b] = _mm256_fmadd_ps(a, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + 8 * b))), acc[b]);
  }
  for (int b = 0; b < kBlocks; ++b) _mm256_storeu_ps(out + d0 + 8 * b, acc[b]);
}

// values_each_cell<axpy_f16_avx2> for head dims that are multiples of 8, 64 dimensions of one
// head per pass over the cells.
__attribute__((target("avx2,fma,f16c"))) void values_f16_avx2(const float* w, int heads, int hd, const CellRows& v,
                                                               size_t n, float* out) {
  for (int h = 0; h < heads; ++h) {
    const float* wh = w + static_cast<size_t>(h) * n;
    float* oh = out + static_cast<size_t>(h) * hd;
    for (int d0 = 0; d0 < hd; d0 += 64) {
      switch (std::min(64, hd - d0) / 8) {
        case 1: values_block_f16_avx2<1>(wh, n, v, d0, oh); break;
        case 2: values_block_f16_avx2<2>(wh, n, v, d0, oh); break;
        case 3: values_block_f16_avx2<3>(wh, n, v, d0, oh); break;
        case 4: values_block_f16_avx2<4>(wh, n, v, d0, oh); break;
        case 5: values_block_f16_avx2<5>(wh, n, v, d0, oh); break;
        case 6: values_block_f16_avx2<6>(wh, n, v, d0, oh); break;
        case 7: values_block_f16_avx2<7>(wh, n, v, d0, oh); break;
        default: values_block_f16_avx2<8>(wh, n, v, d0, oh); break;
      }
    }
  }
}
#endif

using ScoresFn = void (*)(const float* q, int heads, int hd, const CellRows& k, size_t n, float scale, float* scores);
using ValuesFn = void (*)(const float* w, int heads, int hd, const CellRows& v, size_t n, float* out);

struct RowOps {
  ScoresFn scores;
  ValuesFn values;
};

// The scores and V sums for a pool dtype and head size on this CPU.
RowOps row_ops(DType dtype, [[maybe_unused]] int hd) {  // hd: only the AVX2 path looks at it
  switch (dtype) {
    case DType::F32: return {scores_each_cell<dot_each<f32_at>>, values_each_cell<axpy_each<f32_at>>};
    case DType::BF16: return {scores_each_cell<dot_each<bf16_at>>, values_each_cell<axpy_each<bf16_at>>};
    default: break;
  }
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c)
    return hd % 8 == 0 ? RowOps{scores_f16_avx2, values_f16_avx2}
                       : RowOps{scores_each_cell<dot_f16_avx2>, values_each_cell<axpy_f16_avx2>};
#endif
  return {scores_each_cell<dot_each<f16_at>>, values_each_cell<axpy_each<f16_at>>};
}

// Each of `heads` rows of n scores becomes e_j = expf(s_j - m_c) in place; m_c and l_c (the
// sum of the e_j in cell order) per head go to max[h] and sum[h].
void exponentiate_rows(float* scores, int heads, size_t n, float* max, float* sum) {
  for (int h = 0; h < heads; ++h) {
    float* sc = scores + static_cast<size_t>(h) * n;
    float m = sc[0];
    for (size_t j = 1; j < n; ++j) m = std::max(m, sc[j]);
    for (size_t j = 0; j < n; ++j) sc[j] -= m;
    exp_in_place(sc, n);  // std::exp's bits, several at a time
    float l = 0.0f;
    for (size_t j = 0; j < n; ++j) l += sc[j];
    max[h] = m;
    sum[h] = l;
  }
}

// Folds a chunk's (m_c, l_c, o_c) into the running (m, l, o) of one head (attention_order.h).
void fold_chunk(float& m, float& l, float* o, float m_c, float l_c, const float* o_c, int hd) {
  const float m_new = std::max(m, m_c);
  const float a = std::exp(m - m_new), b = std::exp(m_c - m_new);
  l = l * a + l_c * b;
  for (int d = 0; d < hd; ++d) o[d] = o[d] * a + o_c[d] * b;
  m = m_new;
}

struct Scratch {
  std::vector<int32_t> cells;        // the row's visible cells, in list order
  std::vector<size_t> chunk_starts;  // index in `cells` where each chunk starts, then the end
  std::vector<float> scores;         // [the task's heads][the chunk's visible cells]
  std::vector<float> chunk_out;      // [heads][hd]: o_c of chunks after the first
  std::vector<float> max, sum, chunk_max, chunk_sum;  // [heads]
};

// The visible cells of row t (page-list order) into s.cells, and where each chunk of
// kAttentionChunk list entries starts among them into s.chunk_starts.
void collect_visible(const backend::PagedKv& kv, int64_t t, int32_t pos, Scratch& s) {
  s.cells.clear();
  s.chunk_starts.clear();
  int32_t entry = 0;  // list entry of the cell below
  for (int32_t e = kv.page_rows[t]; e < kv.page_rows[t + 1]; ++e) {
    const int32_t first = kv.pages[e] * kv.page_size;
    for (int32_t c = first; c < first + kv.page_size; ++c, ++entry) {
      if (entry % backend::kAttentionChunk == 0) s.chunk_starts.push_back(s.cells.size());
      const int32_t p = kv.cell_pos[c];
      if (p <= pos && (kv.window == 0 || p > pos - kv.window)) s.cells.push_back(c);
    }
  }
  s.chunk_starts.push_back(s.cells.size());
}

// out[heads][hd] for `heads` query heads (q: their rows) over s's visible cells, chunk by chunk
// in the order of attention_order.h. K and V rows of the KV head start at k_base / v_base.
void attend_chunks(const RowOps& ops, const float* q, int heads, int hd, const char* k_base, const char* v_base,
                   size_t row_stride, size_t head_bytes, float scale, Scratch& s, float* out) {
  s.max.resize(heads);
  s.sum.resize(heads);
  s.chunk_max.resize(heads);
  s.chunk_sum.resize(heads);
  s.chunk_out.resize(static_cast<size_t>(heads) * hd);
  bool first = true;
  for (size_t chunk = 0; chunk + 1 < s.chunk_starts.size(); ++chunk) {
    const size_t begin = s.chunk_starts[chunk], n = s.chunk_starts[chunk + 1] - begin;
    if (n == 0) continue;  // no visible cell in this chunk
    s.scores.resize(n * heads);
    const CellRows k_rows{k_base, row_stride, head_bytes, s.cells.data() + begin};
    const CellRows v_rows{v_base, row_stride, head_bytes, s.cells.data() + begin};
    ops.scores(q, heads, hd, k_rows, n, scale, s.scores.data());
    exponentiate_rows(s.scores.data(), heads, n, first ? s.max.data() : s.chunk_max.data(),
                      first ? s.sum.data() : s.chunk_sum.data());
    ops.values(s.scores.data(), heads, hd, v_rows, n, first ? out : s.chunk_out.data());
    if (!first)
      for (int h = 0; h < heads; ++h)
        fold_chunk(s.max[h], s.sum[h], out + static_cast<size_t>(h) * hd, s.chunk_max[h], s.chunk_sum[h],
                   s.chunk_out.data() + static_cast<size_t>(h) * hd, hd);
    first = false;
  }
  for (int h = 0; h < heads; ++h)
    for (int d = 0; d < hd; ++d) out[static_cast<size_t>(h) * hd + d] /= s.sum[h];
}

}  // namespace

void attention(ThreadPool& pool, const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
               const TensorRef& out) {
  if (kv.dtype != DType::F16 && kv.dtype != DType::F32 && kv.dtype != DType::BF16)
    fail(ErrorCode::Unsupported, "attention over a ", dtype_name(kv.dtype), " KV pool");
  const int hd = kv.head_dim;
  const RowOps ops = row_ops(kv.dtype, hd);
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  // A task is a row's heads that share one KV head, or part of them: with few rows (decode)
  // whole groups would leave threads idle (Gemma 3 270M has one KV head: one task per row).
  // Each head's arithmetic is the same however its group is cut, so the bits do not change;
  // a part only reads the K and V rows once for itself instead of once for the whole group.
  const int64_t row_groups = q.rows * kv.n_kv_heads;
  const int64_t wanted_parts = (4 * static_cast<int64_t>(pool.size()) + row_groups - 1) / row_groups;
  const int heads_per_task =
      pool.size() == 1 ? group : static_cast<int>((group + std::min<int64_t>(group, wanted_parts) - 1) /
                                                  std::min<int64_t>(group, wanted_parts));
  const int parts = (group + heads_per_task - 1) / heads_per_task;
  const int64_t n_tasks = row_groups * parts;
  const size_t head_bytes = static_cast<size_t>(hd) * (kv.dtype == DType::F32 ? 4 : 2);

  auto run = [&](int64_t task, int) {
    thread_local Scratch s;
    const int64_t t = task / (kv.n_kv_heads * parts);
    const int g = static_cast<int>(task / parts % kv.n_kv_heads);
    const int h0 = static_cast<int>(task % parts) * heads_per_task;  // this task's heads of the group
    const int heads = std::min(group, h0 + heads_per_task) - h0;
    collect_visible(kv, t, positions[t], s);
    const float* q_heads = q.row<const float>(t) + (g * group + h0) * hd;
    float* out_heads = out.row<float>(t) + (g * group + h0) * hd;
    if (s.cells.empty()) {  // a padding row, or a cache with nothing visible: output zeros
      std::fill(out_heads, out_heads + heads * hd, 0.0f);
      return;
    }
    attend_chunks(ops, q_heads, heads, hd, static_cast<const char*>(kv.k) + g * head_bytes,
                  static_cast<const char*>(kv.v) + g * head_bytes, kv.row_stride, head_bytes, scale, s, out_heads);
  };
  if (n_tasks == 1 || pool.size() == 1) {
    for (int64_t task = 0; task < n_tasks; ++task) run(task, 0);
  } else {
    pool.parallel_for(n_tasks, run);
  }
}

}  // namespace cellm::cpu
