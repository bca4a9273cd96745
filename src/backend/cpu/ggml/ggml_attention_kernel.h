#pragma once
// The body of ggml_attention.h, included by one file per instruction set (portable, AVX2):
// everything here has internal linkage, so each includer gets its own copy compiled for its
// instructions. The loops run over fixed numbers of lanes so that the compiler can turn them
// into vector instructions; they compute the same value whether it does or not.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/f16_table.h"
#include "backend/cpu/ggml/ggml_build.h"
#include "backend/cpu/ggml/ggml_math.h"
#include "backend/cpu/ggml/ggml_sums.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace cellm::cpu::ggml {
namespace {

constexpr int kVectors = 4;  // GGML_F16_ARR: the accumulators of ggml_vec_dot_f16

void widen(const uint16_t* src, float* dst, int n) {
  int i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// The sum of one vector of L lanes where tinyBLAS and the softmax end (16: the AVX-512
// build's _mm512_reduce_add_ps, 8: the AVX2 build's hsum).
template <int L>
float vector_sum(const float* lanes) {
  static_assert(L == 8 || L == 16);
  if constexpr (L == 16) return reduce16(lanes);
  return hsum8(lanes);
}

// The end of ggml_vec_dot_f16: its four vectors of L lanes folded pairwise, then summed.
template <int L>
float vec_dot_reduce(float* acc) {
  for (int l = 0; l < L; ++l) {
    acc[l] += acc[2 * L + l];
    acc[L + l] += acc[3 * L + l];
  }
  for (int l = 0; l < L; ++l) acc[l] += acc[L + l];
  if constexpr (L == 16) return reduce16(acc);
  return hadd8(acc);
}

// a[i] = fma(x[i], y, a[i]) for i < n.
template <int N>
void axpy(float* a, const float* x, float y) {
  for (int i = 0; i < N; ++i) a[i] = std::fma(x[i], y, a[i]);
}
void axpy(float* a, const float* x, float y, int n) {
  for (int i = 0; i < n; ++i) a[i] = std::fma(x[i], y, a[i]);
}
template <int N>
void fma_lanes(float* a, const float* x, const float* y) {
  for (int i = 0; i < N; ++i) a[i] = std::fma(x[i], y[i], a[i]);
}

struct Visible {
  int32_t cell;
  int32_t pos;
};

struct Scratch {
  std::vector<Visible> cells;
  std::vector<float> scores, weights, query, row, acc;
  std::vector<double> tail;
};

// K . q in ggml_vec_dot_f16's order (one token) or tinyBLAS's (several).
template <int L>
float score(bool one_token, const float* k, const float* q, int hd) {
  if (!one_token) {
    float acc[L] = {};
    for (int d = 0; d < hd; d += L) fma_lanes<L>(acc, k + d, q + d);
    return vector_sum<L>(acc);
  }
  constexpr int step = kVectors * L;
  float acc[step] = {};
  const int whole = hd - hd % step;
  for (int d = 0; d < whole; d += step) fma_lanes<step>(acc, k + d, q + d);
  double tail = 0;
  for (int d = whole; d < hd; ++d) tail += static_cast<double>(k[d] * q[d]);
  return static_cast<float>(static_cast<double>(vec_dot_reduce<L>(acc)) + tail);
}

template <int L>
void attend(Build build, bool one_token, const backend::PagedKv& kv, int32_t kv_head, const float* q, float scale,
            bool scale_queries, int64_t n_kv, Scratch& s, float* out) {
  const int hd = kv.head_dim;
  const size_t n = s.cells.size();
  const size_t head_offset = static_cast<size_t>(kv_head) * hd;
  auto k_row = [&](size_t i) {
    return reinterpret_cast<const uint16_t*>(static_cast<const char*>(kv.k) +
                                             static_cast<size_t>(s.cells[i].cell) * kv.row_stride) +
           head_offset;
  };
  auto v_row = [&](size_t i) {
    return reinterpret_cast<const uint16_t*>(static_cast<const char*>(kv.v) +
                                             static_cast<size_t>(s.cells[i].cell) * kv.row_stride) +
           head_offset;
  };
  // The query as ggml converts it for the f16 product (scaled first where the model does).
  s.query.resize(hd);
  s.row.resize(hd);
  for (int d = 0; d < hd; ++d) s.query[d] = fp16_to_fp32(fp32_to_fp16(scale_queries ? q[d] * scale : q[d]));
  const float kq_scale = scale_queries ? 1.0f : scale;

  s.scores.resize(n);
  for (size_t i = 0; i < n; ++i) {
    widen(k_row(i), s.row.data(), hd);
    // ggml_soft_max_ext: scaled, then the mask's 0 added.
    s.scores[i] = score<L>(one_token, s.row.data(), s.query.data(), hd) * kq_scale + 0.0f;
  }

  // softmax: max, ggml_v_expf, the sums of whole vectors (positions [g*L, (g+1)*L)) added in
  // double, the weights scaled by the reciprocal as a float and rounded to f16.
  float max = -INFINITY;
  for (float v : s.scores) max = std::max(max, v);
  double sum = 0;
  float group[L] = {};
  int64_t current = -1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t g = s.cells[i].pos / L;
    if (g != current) {
      if (current >= 0) sum += static_cast<double>(vector_sum<L>(group));
      std::fill(group, group + L, 0.0f);
      current = g;
    }
    s.scores[i] = vector_expf(build, s.scores[i] - max);
    group[s.cells[i].pos % L] = s.scores[i];
  }
  if (current >= 0) sum += static_cast<double>(vector_sum<L>(group));
  const float inv = static_cast<float>(1.0 / sum);
  s.weights.resize(n);
  for (size_t i = 0; i < n; ++i) s.weights[i] = fp16_to_fp32(fp32_to_fp16(s.scores[i] * inv));

  // V^T . p: each output dimension's lanes, cell by cell in position order.
  const int slots = one_token ? kVectors * L : L;
  s.acc.assign(static_cast<size_t>(slots) * hd, 0.0f);
  if (one_token) s.tail.assign(hd, 0.0);
  const int64_t v_whole = n_kv - n_kv % (kVectors * L);
  for (size_t i = 0; i < n; ++i) {
    widen(v_row(i), s.row.data(), hd);
    const int64_t pos = s.cells[i].pos;
    if (one_token && pos >= v_whole) {
      for (int d = 0; d < hd; ++d) s.tail[d] += static_cast<double>(s.row[d] * s.weights[i]);
      continue;
    }
    axpy(s.acc.data() + static_cast<size_t>(pos % slots) * hd, s.row.data(), s.weights[i], hd);
  }
  float lanes[kVectors * L];
  for (int d = 0; d < hd; ++d) {
    for (int l = 0; l < slots; ++l) lanes[l] = s.acc[static_cast<size_t>(l) * hd + d];
    out[d] = one_token ? static_cast<float>(static_cast<double>(vec_dot_reduce<L>(lanes)) + s.tail[d])
                       : vector_sum<L>(lanes);
  }
}

void collect(const backend::PagedKv& kv, int64_t t, int32_t pos, std::vector<Visible>& out) {
  out.clear();
  for (int32_t e = kv.page_rows[t]; e < kv.page_rows[t + 1]; ++e) {
    const int32_t first = kv.pages[e] * kv.page_size;
    for (int32_t c = first; c < first + kv.page_size; ++c) {
      const int32_t p = kv.cell_pos[c];
      if (p <= pos && (kv.window == 0 || p > pos - kv.window)) out.push_back({c, p});
    }
  }
  // Pages are listed in position order (kv/step_buffers.h); the sums below rely on it.
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].pos <= out[i - 1].pos) fail(ErrorCode::Internal, "attention: a row's cells are not in position order");
}

void attention_rows(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
                    const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out) {
  if (kv.dtype != DType::F16)
    fail(ErrorCode::Unsupported, "ggml numerics needs an f16 KV cache (llama.cpp's default), not ", dtype_name(kv.dtype));
  const int64_t T = q.rows;
  const int hd = kv.head_dim;
  const int lanes = vector_lanes(build);
  if (T > 1 && hd % lanes != 0)
    fail(ErrorCode::Unsupported, "ggml numerics: head size ", hd, " is not a multiple of ", lanes, " (tinyBLAS)");
  const int64_t n_heads = q.cols / hd;
  const int64_t group = n_heads / kv.n_kv_heads;
  int32_t max_pos = 0;
  for (int64_t t = 0; t < T; ++t) max_pos = std::max(max_pos, positions[t]);
  // llama_kv_cache_unified::get_n_kv: the cells in use rounded up to 32, at least 32.
  const int64_t n_kv = std::max<int64_t>(32, (static_cast<int64_t>(max_pos) + 1 + 31) / 32 * 32);
  const bool one_token = T == 1;
  pool.parallel_for(T * n_heads, [&](int64_t task, int) {
    const int64_t t = task / n_heads, h = task % n_heads;
    thread_local Scratch s;  // kept by each pool thread across calls: no allocation per step
    float* o = out.row<float>(t) + h * hd;
    collect(kv, t, positions[t], s.cells);
    if (s.cells.empty()) {  // a padding row: nothing visible
      std::fill(o, o + hd, 0.0f);
      return;
    }
    const float* qh = q.row<const float>(t) + h * hd;
    const auto kv_head = static_cast<int32_t>(h / group);
    if (build == Build::Avx512)
      attend<16>(build, one_token, kv, kv_head, qh, scale, scale_queries, n_kv, s, o);
    else
      attend<8>(build, one_token, kv, kv_head, qh, scale, scale_queries, n_kv, s, o);
  });
}

}  // namespace
}  // namespace cellm::cpu::ggml
