// CPU attention over paged cells, the reference the CUDA kernels are held to bit for bit: the
// right values (against a double-precision softmax over the visible cells) for f16, bf16 and
// f32 pools, and the same bits however many threads share the work, including decode rows
// whose few KV-head groups are split into smaller sets of heads; and attention_matmul is
// attention then the product of its output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/attention_order.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "core/half.h"
#include "fused_call_test_support.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

struct Case {
  int rows, n_kv_heads, group, head_dim, window;
};

struct PagedCache {
  int cells = 0, page = 16;
  DType dtype = DType::F16;
  size_t element = 2;       // bytes per K or V element
  std::vector<uint8_t> k, v;  // [cell][kv head][dim] of dtype
  std::vector<int32_t> cell_pos, page_rows, pages, positions;
  std::vector<float> q;
  backend::PagedKv kv;
};

// Element i of a K or V pool of the cache's dtype, widened to float.
float element_of(const PagedCache& s, const std::vector<uint8_t>& pool, size_t i) {
  if (s.dtype == DType::F32) {
    float f;
    std::memcpy(&f, &pool[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &pool[i * 2], 2);
  return s.dtype == DType::BF16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
}

void append_element(std::vector<uint8_t>& pool, DType dtype, float f) {
  uint8_t bytes[4];
  if (dtype == DType::F32) {
    std::memcpy(bytes, &f, 4);
  } else {
    const uint16_t h = dtype == DType::BF16 ? fp32_to_bf16(f) : fp32_to_fp16(f);
    std::memcpy(bytes, &h, 2);
  }
  pool.insert(pool.end(), bytes, bytes + (dtype == DType::F32 ? 4 : 2));
}

// `cells` cells at positions 0..cells-1 in shuffled pages (the last one part-filled); the rows
// sit at the last positions.
PagedCache make(const Case& c, int cells, uint32_t seed, DType dtype = DType::F16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  PagedCache s;
  s.cells = cells;
  s.dtype = dtype;
  s.element = dtype == DType::F32 ? 4 : 2;
  const int width = c.n_kv_heads * c.head_dim;
  for (int i = 0; i < cells * width; ++i) {
    append_element(s.k, dtype, normal(rng));
    append_element(s.v, dtype, normal(rng));
  }
  const int n_pages = (cells + s.page - 1) / s.page;
  std::vector<int32_t> order(n_pages);
  for (int p = 0; p < n_pages; ++p) order[p] = p;
  std::shuffle(order.begin(), order.end(), rng);  // page p of the sequence lives in pool page order[p]
  constexpr int32_t kFree = std::numeric_limits<int32_t>::max();  // what the cache writes in unused cells
  s.cell_pos.assign(static_cast<size_t>(n_pages * s.page), kFree);
  for (int pos = 0; pos < cells; ++pos) s.cell_pos[order[pos / s.page] * s.page + pos % s.page] = pos;
  // Cell data was written by pool row: move each position's K/V to its cell.
  const size_t row = width * s.element;
  std::vector<uint8_t> k(s.cell_pos.size() * row), v(s.cell_pos.size() * row);
  for (size_t cell = 0; cell < s.cell_pos.size(); ++cell)
    if (s.cell_pos[cell] != kFree) {
      std::memcpy(&k[cell * row], &s.k[s.cell_pos[cell] * row], row);
      std::memcpy(&v[cell * row], &s.v[s.cell_pos[cell] * row], row);
    }
  s.k = k;
  s.v = v;
  for (int t = 0; t < c.rows; ++t) {
    s.positions.push_back(cells - c.rows + t);
    s.page_rows.push_back(static_cast<int32_t>(s.pages.size()));
    for (int p = 0; p < n_pages; ++p) s.pages.push_back(order[p]);
  }
  s.page_rows.push_back(static_cast<int32_t>(s.pages.size()));
  for (int i = 0; i < c.rows * c.n_kv_heads * c.group * c.head_dim; ++i) s.q.push_back(normal(rng));
  s.kv = {s.k.data(), s.v.data(), row, dtype, c.n_kv_heads, c.head_dim, c.window,
          s.page, s.cell_pos.data(), s.page_rows.data(), s.pages.data()};
  return s;
}

std::vector<float> run(const Case& c, PagedCache& s, int threads) {
  ThreadPool pool(threads);
  const int64_t cols = static_cast<int64_t>(c.n_kv_heads) * c.group * c.head_dim;
  std::vector<float> out(static_cast<size_t>(c.rows * cols), -9.0f);
  const backend::TensorRef q{s.q.data(), DType::F32, c.rows, cols, cols * sizeof(float)};
  const backend::TensorRef o{out.data(), DType::F32, c.rows, cols, cols * sizeof(float)};
  attention(pool, q, s.kv, s.positions.data(), 1.0f / std::sqrt(static_cast<float>(c.head_dim)), o);
  return out;
}

class CpuAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CpuAttention, RightValuesAndTheSameBitsOnAnyThreadCount) {
  const Case c = GetParam();
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {  // every pool dtype
    SCOPED_TRACE(dtype_name(dtype));
    PagedCache s = make(c, 300, 17, dtype);
    const std::vector<float> one = run(c, s, 1);
    for (int threads : {2, 3, 8}) {
      const std::vector<float> many = run(c, s, threads);
      ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << threads << " threads";
    }
    // Against softmax(q . k / sqrt(d)) . v in double over the cells each row may see.
    const int width = c.n_kv_heads * c.head_dim;
    const int64_t cols = static_cast<int64_t>(width) * c.group;
    double worst = 0;
    for (int t = 0; t < c.rows; ++t) {
      const int pos = s.positions[t];
      for (int head = 0; head < c.n_kv_heads * c.group; ++head) {
        const int g = head / c.group;
        std::vector<double> score;
        std::vector<size_t> seen;
        for (size_t cell = 0; cell < s.cell_pos.size(); ++cell) {
          const int p = s.cell_pos[cell];
          if (p > pos || (c.window > 0 && p <= pos - c.window)) continue;
          double dot = 0;
          for (int i = 0; i < c.head_dim; ++i)
            dot += s.q[t * cols + head * c.head_dim + i] * element_of(s, s.k, cell * width + g * c.head_dim + i);
          score.push_back(dot / std::sqrt(static_cast<double>(c.head_dim)));
          seen.push_back(cell);
        }
        double max = score[0], sum = 0;
        for (double x : score) max = std::max(max, x);
        for (double& x : score) sum += (x = std::exp(x - max));
        for (int i = 0; i < c.head_dim; ++i) {
          double want = 0;
          for (size_t j = 0; j < seen.size(); ++j) want += score[j] / sum * element_of(s, s.v, seen[j] * width + g * c.head_dim + i);
          worst = std::max(worst, std::abs(want - one[t * cols + head * c.head_dim + i]));
        }
      }
    }
    EXPECT_LT(worst, 1e-5);
  }
}

// The arithmetic the CUDA kernel reproduces (backend/attention_order.h), written out in scalar
// form: the row's page list cut into chunks of kAttentionChunk entries; per chunk, scores as
// eight lane sums of fused multiply-adds folded ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)) times the
// scale, exponentials against the chunk's max summed in float in cell order, V summed with
// fused multiply-adds in cell order; chunks folded left to right; the output o / l.
std::vector<float> defined_arithmetic(const Case& c, const PagedCache& s) {
  const int width = c.n_kv_heads * c.head_dim;
  const int64_t cols = static_cast<int64_t>(width) * c.group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> out(static_cast<size_t>(c.rows * cols), 0.0f);
  for (int t = 0; t < c.rows; ++t) {
    const int pos = s.positions[t];
    std::vector<std::vector<size_t>> chunks;  // visible cells of each chunk, in page-list order
    int entry = 0;
    for (int e = s.page_rows[t]; e < s.page_rows[t + 1]; ++e)
      for (int cell = s.pages[e] * s.page; cell < (s.pages[e] + 1) * s.page; ++cell, ++entry) {
        if (entry % backend::kAttentionChunk == 0) chunks.emplace_back();
        const int p = s.cell_pos[cell];
        if (p <= pos && (c.window == 0 || p > pos - c.window)) chunks.back().push_back(static_cast<size_t>(cell));
      }
    for (int head = 0; head < c.n_kv_heads * c.group; ++head) {
      const int g = head / c.group;
      const float* q = &s.q[t * cols + head * c.head_dim];
      bool started = false;
      float m = 0, l = 0;
      std::vector<float> o(c.head_dim);
      for (const std::vector<size_t>& seen : chunks) {
        if (seen.empty()) continue;
        std::vector<float> w;
        for (size_t cell : seen) {
          float lane[8] = {};
          for (int i = 0; i < c.head_dim; ++i)
            lane[i % 8] = std::fma(q[i], element_of(s, s.k, cell * width + g * c.head_dim + i), lane[i % 8]);
          const float folded =
              ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
          w.push_back(folded * scale);
        }
        float m_c = w[0], l_c = 0.0f;
        for (float x : w) m_c = std::max(m_c, x);
        for (float& x : w) l_c += (x = std::exp(x - m_c));
        std::vector<float> o_c(c.head_dim);
        for (int i = 0; i < c.head_dim; ++i) {
          float y = 0.0f;
          for (size_t j = 0; j < seen.size(); ++j)
            y = std::fma(w[j], element_of(s, s.v, seen[j] * width + g * c.head_dim + i), y);
          o_c[i] = y;
        }
        if (!started) {
          m = m_c, l = l_c, o = o_c, started = true;
          continue;
        }
        const float m_new = std::max(m, m_c);
        const float a = std::exp(m - m_new), b = std::exp(m_c - m_new);
        l = l * a + l_c * b;
        for (int i = 0; i < c.head_dim; ++i) o[i] = o[i] * a + o_c[i] * b;
        m = m_new;
      }
      for (int i = 0; i < c.head_dim; ++i) out[t * cols + head * c.head_dim + i] = started ? o[i] / l : 0.0f;
    }
  }
  return out;
}

TEST_P(CpuAttention, GivesTheDefinedArithmeticBitForBit) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "the portable path sums in another order";
  const Case c = GetParam();
  PagedCache s = make(c, 300, 23);
  const std::vector<float> got = run(c, s, 2);
  const std::vector<float> want = defined_arithmetic(c, s);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(float_to_bits(got[i]), float_to_bits(want[i])) << "element " << i << ": " << got[i] << " vs " << want[i];
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuAttention,
                         testing::Values(Case{1, 1, 4, 256, 0},   // Gemma 3 270M decode: one KV head
                                         Case{1, 3, 3, 64, 0},    // SmolLM2 decode
                                         Case{2, 1, 4, 64, 48},   // a window
                                         Case{7, 2, 2, 32, 0},    // a prefill slice
                                         Case{1, 8, 1, 64, 0}));  // no grouping

// Backend::attention_matmul (the executor's call for an Attention op followed by a MatMul or
// MatMulAdd of its output) is, bit for bit, attention into `attn_out` and then matmul (or
// matmul_add) of `attn_out`: backends that fuse it (CUDA quantizes the product's activations in
// the attention kernel) must give these bits, and the CPU computes exactly this.
TEST(AttentionMatmul, IsAttentionThenTheProductOfItsOutput) {
  CpuBackend cpu(2);
  const Case c{3, 2, 2, 64, 0};
  PagedCache s = make(c, 100, 29);
  const int64_t T = c.rows, cols = int64_t{c.n_kv_heads} * c.group * c.head_dim, rows = 24;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const auto residual = test::random_activations(T, rows, rows, 6);
  const backend::TensorRef q{s.q.data(), DType::F32, T, cols, cols * sizeof(float)};
  for (DType type : {DType::Q4_K, DType::Q8_0}) {
    const auto w = test::random_weights(type, rows, cols, 7);
    const backend::TensorRef wr{const_cast<void*>(w.matrix.data), type, rows, cols, w.matrix.row_bytes};
    test::expect_fused_is_apart(
        cpu, T, cols, wr, residual,
        [&](const backend::TensorRef& attn, const backend::TensorRef* res, const backend::TensorRef& out) {
          cpu.attention_matmul(q, s.kv, s.positions.data(), scale, attn, wr, nullptr, res, out);
        },
        [&](const backend::TensorRef& attn) { cpu.attention(q, s.kv, s.positions.data(), scale, attn); },
        std::string(dtype_name(type)));
  }
}

}  // namespace
}  // namespace cellm::cpu
