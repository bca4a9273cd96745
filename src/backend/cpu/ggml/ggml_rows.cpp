#include "backend/cpu/ggml/ggml_rows.h"

#include <cmath>
#include <vector>

#include "backend/cpu/ggml/ggml_math.h"
#include "core/error.h"

namespace cellm::cpu::ggml {
namespace {

template <typename Fn>
void for_each_row(ThreadPool& pool, int64_t rows, Fn&& fn) {
  if (rows <= 1 || pool.size() == 1) {
    for (int64_t r = 0; r < rows; ++r) fn(r);
    return;
  }
  pool.parallel_for(rows, [&](int64_t r, int) { fn(r); });
}

void require_f32(const backend::TensorRef& t, const char* what) {
  if (t.dtype != DType::F32) fail(ErrorCode::Internal, what, " must be f32, got ", dtype_name(t.dtype));
}

}  // namespace

void rms_norm(ThreadPool& pool, const backend::TensorRef& x, const float* weight, int32_t group, float eps,
              const backend::TensorRef& out) {
  require_f32(x, "rms_norm input");
  if (group <= 0 || x.cols % group != 0) fail(ErrorCode::Internal, "rms_norm group ", group, " does not divide ", x.cols);
  for_each_row(pool, x.rows, [&](int64_t t) {
    const float* xr = x.row<const float>(t);
    float* yr = out.row<float>(t);
    for (int64_t g = 0; g < x.cols; g += group) {
      double sum = 0.0;
      for (int32_t i = 0; i < group; ++i) sum += static_cast<double>(xr[g + i] * xr[g + i]);
      const float mean = static_cast<float>(sum / group);
      const float scale = 1.0f / std::sqrt(mean + eps);
      for (int32_t i = 0; i < group; ++i) yr[g + i] = (xr[g + i] * scale) * weight[i];
    }
  });
}

void rope(ThreadPool& pool, const backend::TensorRef& x, const int32_t* positions, const backend::RopeParams& p) {
  require_f32(x, "rope input");
  const int n_dims = p.rope_dim;
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(n_dims));
  for_each_row(pool, x.rows, [&](int64_t t) {
    // ggml_rope_cache_init: one cos/sin pair per rotated pair of dimensions.
    thread_local std::vector<float> cache;
    cache.resize(static_cast<size_t>(n_dims));
    float theta = static_cast<float>(positions[t]);
    for (int i = 0; i < n_dims; i += 2) {
      const float angle = p.freq_scale * theta;
      cache[i] = std::cos(angle);
      cache[i + 1] = std::sin(angle);
      theta *= theta_scale;
    }
    float* row = x.row<float>(t);
    for (int h = 0; h < p.n_heads; ++h) {
      float* head = row + static_cast<int64_t>(h) * p.head_dim;
      for (int i = 0; i < n_dims; i += 2) {
        const float c = cache[i], s = cache[i + 1];
        float& a = head[p.layout == backend::RopeLayout::Neox ? i / 2 : i];
        float& b = head[p.layout == backend::RopeLayout::Neox ? i / 2 + n_dims / 2 : i + 1];
        const float x0 = a, x1 = b;
        a = std::fma(x0, c, -(x1 * s));
        b = std::fma(x0, s, x1 * c);
      }
    }
  });
}

void glu(Build build, ThreadPool& pool, const backend::TensorRef& gate, const backend::TensorRef& up,
         backend::GluActivation act, const backend::TensorRef& out) {
  const int64_t n = gate.cols;
  const int64_t whole = n - n % vector_lanes(build);
  for_each_row(pool, gate.rows, [&](int64_t t) {
    const float* g = gate.row<const float>(t);
    const float* u = up.row<const float>(t);
    float* y = out.row<float>(t);
    if (act == backend::GluActivation::Silu) {
      for (int64_t i = 0; i < whole; ++i) y[i] = vector_silu(build, g[i]) * u[i];
      for (int64_t i = whole; i < n; ++i) y[i] = scalar_silu(g[i]) * u[i];
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = geglu(g[i], u[i]);
    }
  });
}

}  // namespace cellm::cpu::ggml
