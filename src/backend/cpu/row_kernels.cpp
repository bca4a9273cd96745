// Row-wise kernels: embedding lookup, RMSNorm, residual add, gated activations, row gather,
// KV store. They are memory-bound and small per row, so work is split only when there is
// enough of it to pay for waking the other threads.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/f16_table.h"
#include "backend/rms_norm_order.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tanh_glibc.h"
#include "gguf/dequantize.h"

namespace cellm::cpu {
namespace {

constexpr int64_t kElementsPerTask = 16384;

// Runs fn(row_begin, row_end) over `rows` rows of `cols` elements each, split across the pool.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t rows, int64_t cols, Fn&& fn) {
  const int64_t work = rows * cols;
  const int64_t tasks = std::min<int64_t>({rows, pool.size(), std::max<int64_t>(1, work / kElementsPerTask)});
  if (tasks <= 1) {
    fn(int64_t{0}, rows);
    return;
  }
  pool.parallel_for(tasks, [&](int64_t task, int) {
    const Chunk c = chunk_of(rows, tasks, task);
    fn(c.begin, c.end);
  });
}

// The sum of x_i^2 over n elements in the order of rms_norm_order.h.
double sum_of_squares(const float* x, int32_t n) {
  constexpr int kParts = backend::kRmsNormPartials;
  double part[kParts] = {};
  int32_t base = 0;
  for (; base + kParts <= n; base += kParts)
    for (int p = 0; p < kParts; ++p) part[p] += static_cast<double>(x[base + p]) * x[base + p];
  for (int p = 0; base + p < n; ++p) part[p] += static_cast<double>(x[base + p]) * x[base + p];
  for (int w = 0; w < kParts; w += 32)
    for (int s = 16; s >= 1; s /= 2)
      for (int l = 0; l < s; ++l) part[w + l] += part[w + l + s];
  double runs[kParts / 32];
  for (int w = 0; w < kParts / 32; ++w) runs[w] = part[32 * w];
  for (int s = kParts / 64; s >= 1; s /= 2)
    for (int w = 0; w < s; ++w) runs[w] += runs[w + s];
  return runs[0];
}

void require_f32(const TensorRef& t, const char* what) {
  if (t.dtype != DType::F32) fail(ErrorCode::Internal, what, " must be f32, got ", dtype_name(t.dtype));
}

}  // namespace

void embed(ThreadPool& pool, const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) {
  require_f32(out, "embedding output");
  for (int64_t t = 0; t < out.rows; ++t)
    if (tokens[t] < 0 || tokens[t] >= table.rows)
      fail(ErrorCode::InvalidArgument, "token id ", tokens[t], " is outside the vocabulary of ", table.rows);
  for_rows(pool, out.rows, out.cols, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* y = out.row<float>(t);
      gguf::dequantize_row(table.dtype, table.row<const uint8_t>(tokens[t]), y, out.cols);
      if (scale != 1.0f)
        for (int64_t i = 0; i < out.cols; ++i) y[i] *= scale;
    }
  });
}

void rms_norm(ThreadPool& pool, const TensorRef& x, const float* weight, int32_t group, float eps,
              const TensorRef& out) {
  require_f32(x, "rms_norm input");
  if (group <= 0 || x.cols % group != 0) fail(ErrorCode::Internal, "rms_norm group ", group, " does not divide ", x.cols);
  for_rows(pool, out.rows, out.cols, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xr = x.row<const float>(t);
      float* yr = out.row<float>(t);
      for (int64_t g = 0; g < x.cols; g += group) {
        // The sum of squares in double, so long rows lose nothing to rounding.
        const double sum = sum_of_squares(xr + g, group);
        const float mean = static_cast<float>(sum / group);
        const float inv = 1.0f / std::sqrt(mean + eps);
        for (int32_t i = 0; i < group; ++i) yr[g + i] = (xr[g + i] * inv) * weight[i];
      }
    }
  });
}

void add(ThreadPool& pool, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  for_rows(pool, out.rows, out.cols, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* ar = a.row<const float>(t);
      const float* br = b.row<const float>(t);
      float* yr = out.row<float>(t);
      for (int64_t i = 0; i < out.cols; ++i) yr[i] = ar[i] + br[i];
    }
  });
}

namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// GeGLU, gelu_tanh(g) * u with gelu_tanh(x) = 0.5f * x * (1.0f + tanh(kSqrt2OverPi * x * (1.0f +
// kCoef * x * x))), each step rounded, left to right (the CUDA backend's glu_rules.cuh takes the
// same steps). The tanh arguments of the whole row first, then one batched tanh (std::tanh's
// bits; a quarter of a Gemma 3 prefill went to calling it value by value), then the products.
void geglu_row(const float* g, const float* u, float* y, int64_t n) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  thread_local std::vector<float> t;
  t.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = kSqrt2OverPi * g[i] * (1.0f + kCoef * g[i] * g[i]);
  tanh_in_place(t.data(), t.size());
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * g[i] * (1.0f + t[i]) * u[i];
}

}  // namespace

void glu(ThreadPool& pool, const TensorRef& gate, const TensorRef& up, backend::GluActivation act,
         const TensorRef& out) {
  for_rows(pool, out.rows, out.cols, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* g = gate.row<const float>(t);
      const float* u = up.row<const float>(t);
      float* y = out.row<float>(t);
      if (act == backend::GluActivation::Silu) {
        for (int64_t i = 0; i < out.cols; ++i) y[i] = silu(g[i]) * u[i];
      } else {
        geglu_row(g, u, y, out.cols);
      }
    }
  });
}

void gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) {
  const size_t bytes = row_bytes(x.dtype, x.cols);
  for (int64_t i = 0; i < out.rows; ++i) {
    if (rows[i] < 0 || rows[i] >= x.rows)
      fail(ErrorCode::InvalidArgument, "logit row ", rows[i], " is outside the step's ", x.rows, " rows");
    std::memcpy(out.row<uint8_t>(i), x.row<const uint8_t>(rows[i]), bytes);
  }
}

void kv_store(ThreadPool& pool, const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) {
  const int64_t n = k.cols;
  for_rows(pool, k.rows, 2 * n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (dst.cells[t] < 0) continue;  // a padding row
      const size_t offset = static_cast<size_t>(dst.cells[t]) * dst.row_stride;
      auto store = [&](const float* src, void* base) {
        char* row = static_cast<char*>(base) + offset;
        switch (dst.dtype) {
          case DType::F16: {
            auto* d = reinterpret_cast<uint16_t*>(row);
            for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
            break;
          }
          case DType::BF16: {
            auto* d = reinterpret_cast<uint16_t*>(row);
            for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
            break;
          }
          case DType::F32: std::memcpy(row, src, static_cast<size_t>(n) * sizeof(float)); break;
          default: fail(ErrorCode::Unsupported, "KV dtype ", dtype_name(dst.dtype));
        }
      };
      store(k.row<const float>(t), dst.k);
      store(v.row<const float>(t), dst.v);
    }
  });
}

}  // namespace cellm::cpu
