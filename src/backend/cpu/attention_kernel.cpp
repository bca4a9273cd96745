// Attention over the cells of the off-graph cache. Each query row walks only its own page list
// (cost follows what the row can see, not the pool), keeps the cells that pass the causal and
// window test, and computes a two-pass softmax: scores, then the weighted sum of V in the
// order of the page list. Heads that share a KV head are processed together so each K and V
// row is loaded once per group; decode rows, too few to keep every thread busy that way, split
// their groups. Cells are walked through rows prefetched a few cells ahead.
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/exp_glibc.h"
#include "backend/cpu/f16_table.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/half.h"

namespace cellm::cpu {
namespace {

using DotFn = float (*)(const float* q, const uint16_t* k, int n);
using AxpyFn = void (*)(float a, const uint16_t* v, float* y, int n);

float dot_f16_portable(const float* q, const uint16_t* k, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += q[i] * f16_to_f32(k[i]);
  return sum;
}

void axpy_f16_portable(float a, const uint16_t* v, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * f16_to_f32(v[i]);
}

// The rows of one KV head over a task's cells: cell c's row starts at base + c * stride.
struct CellRows {
  const char* base;
  size_t stride;
  const int32_t* cells;
  const uint16_t* at(size_t j) const {
    return reinterpret_cast<const uint16_t*>(base + static_cast<size_t>(cells[j]) * stride);
  }
};

// Consecutive cells lie a whole cell row (every layer's K and V) apart, beyond what the
// hardware prefetcher follows: rows are fetched this many cells ahead.
constexpr size_t kAhead = 6;

inline void prefetch_row(const void* row, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(row) + b);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) float dot_f16_avx2(const float* q, const uint16_t* k, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i)));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += q[i] * fp16_to_fp32(k[i]);
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) void axpy_f16_avx2(float a, const uint16_t* v, float* y, int n) {
  const __m256 av = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, vv, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * fp16_to_fp32(v[i]);
}

// Scores of `heads` heads (q: their rows, one after the other) against every cell, exactly as
// dot_f16_avx2 computes each (head_dim a multiple of 8), without a call per cell and head.
__attribute__((target("avx2,fma,f16c"))) void scores_f16_avx2(const float* q, int heads, int hd, const CellRows& k,
                                                               size_t n, float scale, float* scores) {
  const size_t bytes = static_cast<size_t>(hd) * 2;
  for (size_t j = 0; j < std::min(n, kAhead); ++j) prefetch_row(k.at(j), bytes);
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) prefetch_row(k.at(j + kAhead), bytes);
    const uint16_t* kr = k.at(j);
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + static_cast<size_t>(h) * hd;
      __m256 acc = _mm256_setzero_ps();
      for (int i = 0; i < hd; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(qh + i), _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kr + i))), acc);
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      scores[static_cast<size_t>(h) * n + j] = _mm_cvtss_f32(s) * scale;
    }
  }
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
    if (j + kAhead < n) prefetch_row(v.at(j + kAhead) + d0, kBlocks * 16);
    const uint16_t* vr = v.at(j) + d0;
    const __m256 a = _mm256_set1_ps(w[j]);
    for (int b = 0; b < kBlocks; ++b)
      acc[b] = _mm256_fmadd_ps(a, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + 8 * b))), acc[b]);
  }
  for (int b = 0; b < kBlocks; ++b) _mm256_storeu_ps(out + d0 + 8 * b, acc[b]);
}

// Every head's weighted sum of V (head_dim a multiple of 8), 64 dimensions per pass.
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

struct F16Ops {
  DotFn dot;
  AxpyFn axpy;
  // Whole-task versions for head dims that are multiples of 8 (null: none on this CPU).
  ScoresFn scores = nullptr;
  ValuesFn values = nullptr;
};

F16Ops pick_f16_ops() {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c) return {dot_f16_avx2, axpy_f16_avx2, scores_f16_avx2, values_f16_avx2};
#endif
  return {dot_f16_portable, axpy_f16_portable};
}

// Each of `heads` rows of n scores becomes its softmax: max, exponentials summed in double in
// cell order, one reciprocal.
void softmax_rows(float* scores, int heads, size_t n) {
  for (int h = 0; h < heads; ++h) {
    float* sc = scores + static_cast<size_t>(h) * n;
    float max = sc[0];
    for (size_t j = 1; j < n; ++j) max = std::max(max, sc[j]);
    for (size_t j = 0; j < n; ++j) sc[j] -= max;
    exp_in_place(sc, n);  // std::exp's bits, several at a time
    double sum = 0;
    for (size_t j = 0; j < n; ++j) sum += sc[j];
    const float inv = static_cast<float>(1.0 / sum);
    for (size_t j = 0; j < n; ++j) sc[j] *= inv;
  }
}

// Converts one K or V row of a non-f16 pool to float.
void load_row(DType dtype, const void* src, float* dst, int n) {
  if (dtype == DType::F32) {
    const auto* s = static_cast<const float*>(src);
    for (int i = 0; i < n; ++i) dst[i] = s[i];
  } else {
    const auto* s = static_cast<const uint16_t*>(src);
    for (int i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
  }
}

struct Scratch {
  std::vector<int32_t> cells;
  std::vector<float> scores;  // [the task's heads][visible cells]
  std::vector<float> k_row, v_row;
};

}  // namespace

void attention(ThreadPool& pool, const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
               const TensorRef& out) {
  if (kv.dtype != DType::F16 && kv.dtype != DType::F32 && kv.dtype != DType::BF16)
    fail(ErrorCode::Unsupported, "attention over a ", dtype_name(kv.dtype), " KV pool");
  static const F16Ops f16 = pick_f16_ops();
  const int hd = kv.head_dim;
  const int n_heads = static_cast<int>(q.cols / hd);
  const int group = n_heads / kv.n_kv_heads;
  // A task is a row's heads that share one KV head, or part of them: with few rows (decode)
  // whole groups would leave threads idle (Gemma 3 270M has one KV head: one task per row).
  // Each head's arithmetic is the same however its group is cut (its scores, softmax and V sum
  // in cell order), so the bits do not change; a part only reads the K and V rows once for
  // itself instead of once for the whole group.
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
    const int h1 = std::min(group, h0 + heads_per_task);
    const int heads = h1 - h0;
    const int32_t pos = positions[t];
    s.cells.clear();
    for (int32_t e = kv.page_rows[t]; e < kv.page_rows[t + 1]; ++e) {
      const int32_t first = kv.pages[e] * kv.page_size;
      for (int32_t c = first; c < first + kv.page_size; ++c) {
        const int32_t p = kv.cell_pos[c];
        if (p <= pos && (kv.window == 0 || p > pos - kv.window)) s.cells.push_back(c);
      }
    }
    const size_t n = s.cells.size();
    const float* qrow = q.row<const float>(t);
    float* orow = out.row<float>(t);
    for (int h = h0; h < h1; ++h) std::fill(orow + (g * group + h) * hd, orow + (g * group + h + 1) * hd, 0.0f);
    if (n == 0) return;  // a padding row, or a cache with nothing visible: output zeros
    s.scores.resize(n * heads);
    s.k_row.resize(hd);
    s.v_row.resize(hd);
    auto k_at = [&](int32_t c) {
      return static_cast<const char*>(kv.k) + static_cast<size_t>(c) * kv.row_stride + g * head_bytes;
    };
    auto v_at = [&](int32_t c) {
      return static_cast<const char*>(kv.v) + static_cast<size_t>(c) * kv.row_stride + g * head_bytes;
    };
    const float* q_first = qrow + (g * group + h0) * hd;
    float* out_first = orow + (g * group + h0) * hd;
    if (kv.dtype == DType::F16 && f16.scores != nullptr && hd % 8 == 0) {
      const CellRows k_rows{static_cast<const char*>(kv.k) + g * head_bytes, kv.row_stride, s.cells.data()};
      const CellRows v_rows{static_cast<const char*>(kv.v) + g * head_bytes, kv.row_stride, s.cells.data()};
      f16.scores(q_first, heads, hd, k_rows, n, scale, s.scores.data());
      softmax_rows(s.scores.data(), heads, n);
      f16.values(s.scores.data(), heads, hd, v_rows, n, out_first);
      return;
    }
    auto prefetch = [&](const char* row) { prefetch_row(row, head_bytes); };
    for (size_t j = 0; j < std::min(n, kAhead); ++j) prefetch(k_at(s.cells[j]));
    for (size_t j = 0; j < n; ++j) {
      if (j + kAhead < n) prefetch(k_at(s.cells[j + kAhead]));
      const void* k = k_at(s.cells[j]);
      for (int h = h0; h < h1; ++h) {
        const float* qh = qrow + (g * group + h) * hd;
        float dot;
        if (kv.dtype == DType::F16) {
          dot = f16.dot(qh, static_cast<const uint16_t*>(k), hd);
        } else {
          load_row(kv.dtype, k, s.k_row.data(), hd);
          dot = 0;
          for (int i = 0; i < hd; ++i) dot += qh[i] * s.k_row[i];
        }
        s.scores[(h - h0) * n + j] = dot * scale;
      }
    }
    softmax_rows(s.scores.data(), heads, n);
    for (size_t j = 0; j < std::min(n, kAhead); ++j) prefetch(v_at(s.cells[j]));
    for (size_t j = 0; j < n; ++j) {
      if (j + kAhead < n) prefetch(v_at(s.cells[j + kAhead]));
      const void* v = v_at(s.cells[j]);
      if (kv.dtype != DType::F16) load_row(kv.dtype, v, s.v_row.data(), hd);
      for (int h = h0; h < h1; ++h) {
        float* oh = orow + (g * group + h) * hd;
        const float w = s.scores[(h - h0) * n + j];
        if (kv.dtype == DType::F16) {
          f16.axpy(w, static_cast<const uint16_t*>(v), oh, hd);
        } else {
          for (int i = 0; i < hd; ++i) oh[i] += w * s.v_row[i];
        }
      }
    }
  };
  if (n_tasks == 1 || pool.size() == 1) {
    for (int64_t task = 0; task < n_tasks; ++task) run(task, 0);
  } else {
    pool.parallel_for(n_tasks, run);
  }
}

}  // namespace cellm::cpu
