// Attention over the cells of the off-graph cache. Each query row walks only its own page list
// (cost follows what the row can see, not the pool), keeps the cells that pass the causal and
// window test, and computes a two-pass softmax: scores, then the weighted sum of V in the
// order of the page list. Heads that share a KV head are processed together so each K and V
// row is loaded once per group.
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_features.h"
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
#endif

struct F16Ops {
  DotFn dot;
  AxpyFn axpy;
};

F16Ops pick_f16_ops() {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.avx2 && f.fma && f.f16c) return {dot_f16_avx2, axpy_f16_avx2};
#endif
  return {dot_f16_portable, axpy_f16_portable};
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
  std::vector<float> scores;  // [heads in group][visible cells]
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
  const int64_t n_tasks = q.rows * kv.n_kv_heads;
  const size_t head_bytes = static_cast<size_t>(hd) * (kv.dtype == DType::F32 ? 4 : 2);

  auto run = [&](int64_t task, int) {
    thread_local Scratch s;
    const int64_t t = task / kv.n_kv_heads;
    const int g = static_cast<int>(task % kv.n_kv_heads);
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
    for (int h = 0; h < group; ++h) std::fill(orow + (g * group + h) * hd, orow + (g * group + h + 1) * hd, 0.0f);
    if (n == 0) return;  // a padding row, or a cache with nothing visible: output zeros
    s.scores.resize(n * group);
    s.k_row.resize(hd);
    s.v_row.resize(hd);
    auto k_at = [&](int32_t c) {
      return static_cast<const char*>(kv.k) + static_cast<size_t>(c) * kv.row_stride + g * head_bytes;
    };
    auto v_at = [&](int32_t c) {
      return static_cast<const char*>(kv.v) + static_cast<size_t>(c) * kv.row_stride + g * head_bytes;
    };
    for (size_t j = 0; j < n; ++j) {
      const void* k = k_at(s.cells[j]);
      for (int h = 0; h < group; ++h) {
        const float* qh = qrow + (g * group + h) * hd;
        float dot;
        if (kv.dtype == DType::F16) {
          dot = f16.dot(qh, static_cast<const uint16_t*>(k), hd);
        } else {
          load_row(kv.dtype, k, s.k_row.data(), hd);
          dot = 0;
          for (int i = 0; i < hd; ++i) dot += qh[i] * s.k_row[i];
        }
        s.scores[h * n + j] = dot * scale;
      }
    }
    for (int h = 0; h < group; ++h) {
      float* sc = s.scores.data() + h * n;
      float max = sc[0];
      for (size_t j = 1; j < n; ++j) max = std::max(max, sc[j]);
      double sum = 0;
      for (size_t j = 0; j < n; ++j) {
        sc[j] = std::exp(sc[j] - max);
        sum += sc[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (size_t j = 0; j < n; ++j) sc[j] *= inv;
    }
    for (size_t j = 0; j < n; ++j) {
      const void* v = v_at(s.cells[j]);
      if (kv.dtype != DType::F16) load_row(kv.dtype, v, s.v_row.data(), hd);
      for (int h = 0; h < group; ++h) {
        float* oh = orow + (g * group + h) * hd;
        const float w = s.scores[h * n + j];
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
