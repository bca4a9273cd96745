// ggml numerics (backend/cpu/ggml): the pieces whose bits the end-to-end check against llama.cpp
// (tests/batching/test_reference_parity.cpp) cannot pin down one by one. The AVX2 code must give
// the reference code's bits (it is the same order computed with vectors), the activation
// quantizers must make ggml's choices, and the vector exponentials must be exponentials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/ggml/ggml_attention.h"
#include "backend/cpu/ggml/ggml_backend.h"
#include "backend/cpu/ggml/ggml_dot.h"
#include "backend/cpu/ggml/ggml_math.h"
#include "backend/cpu/ggml/ggml_quantize.h"
#include "common/expect_error.h"
#include "core/error.h"
#include "core/half.h"

namespace cellm::cpu::ggml {
namespace {

using gguf::BlockQ8_0;
using gguf::BlockQ8_K;

bool has_avx2() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

// Random blocks of a format: random code bytes, fp16 scales of a sane size.
template <typename Block>
std::vector<Block> random_blocks(std::mt19937& rng, size_t n) {
  std::vector<Block> blocks(n);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (Block& b : blocks) {
    auto* bytes = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(byte(rng));
    if constexpr (requires { b.m; }) b.m = fp32_to_fp16(-scale(rng));
    if constexpr (requires { b.dmin; }) b.dmin = fp32_to_fp16(scale(rng));
    b.d = fp32_to_fp16(scale(rng));
  }
  return blocks;
}

std::vector<float> random_row(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

uint32_t bits(float f) { return float_to_bits(f); }

TEST(GgmlProducts, Avx2GivesTheReferenceBits) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2/FMA/F16C here";
  std::mt19937 rng(11);
  constexpr int kBlocks32 = 24, kBlocks256 = 3;  // 768 elements per row
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> x = random_row(rng, 768);
    std::vector<BlockQ8_0> a8(kBlocks32);
    std::vector<BlockQ8_1> a81(kBlocks32);
    std::vector<BlockQ8_K> ak(kBlocks256);
    quantize_q8_0(x.data(), a8.data(), 768);
    quantize_q8_1(x.data(), a81.data(), 768);
    quantize_q8_K(x.data(), ak.data(), 768, trial % 2 == 0);
    // Q8_0 weights as ggml's quantizer makes them (codes in [-127, 127]).
    std::vector<BlockQ8_0> w8(kBlocks32);
    quantize_q8_0(random_row(rng, 768).data(), w8.data(), 768);

    const auto q4_0 = random_blocks<gguf::BlockQ4_0>(rng, kBlocks32);
    EXPECT_EQ(bits(dot_q4_0(q4_0.data(), a8.data(), kBlocks32)), bits(avx2::dot_q4_0(q4_0.data(), a8.data(), kBlocks32)));
    EXPECT_EQ(bits(dot_q4_0_repacked(q4_0.data(), a8.data(), kBlocks32)),
              bits(avx2::dot_q4_0_repacked(q4_0.data(), a8.data(), kBlocks32)));
    const auto q4_1 = random_blocks<gguf::BlockQ4_1>(rng, kBlocks32);
    EXPECT_EQ(bits(dot_q4_1(q4_1.data(), a81.data(), kBlocks32)), bits(avx2::dot_q4_1(q4_1.data(), a81.data(), kBlocks32)));
    const auto q5_0 = random_blocks<gguf::BlockQ5_0>(rng, kBlocks32);
    EXPECT_EQ(bits(dot_q5_0(q5_0.data(), a8.data(), kBlocks32)), bits(avx2::dot_q5_0(q5_0.data(), a8.data(), kBlocks32)));
    const auto q5_1 = random_blocks<gguf::BlockQ5_1>(rng, kBlocks32);
    EXPECT_EQ(bits(dot_q5_1(q5_1.data(), a81.data(), kBlocks32)), bits(avx2::dot_q5_1(q5_1.data(), a81.data(), kBlocks32)));
    EXPECT_EQ(bits(dot_q8_0(w8.data(), a8.data(), kBlocks32)), bits(avx2::dot_q8_0(w8.data(), a8.data(), kBlocks32)));
    auto q6_K = random_blocks<gguf::BlockQ6_K>(rng, kBlocks256);
    for (auto& b : q6_K)
      for (int8_t& s : b.scales) s = static_cast<int8_t>(s / 2);  // 6-bit-ish scales, as files have
    EXPECT_EQ(bits(dot_q6_K(q6_K.data(), ak.data(), kBlocks256)), bits(avx2::dot_q6_K(q6_K.data(), ak.data(), kBlocks256)));
    const auto q4_K = random_blocks<gguf::BlockQ4_K>(rng, kBlocks256);
    for (bool group : {false, true})
      EXPECT_EQ(bits(dot_q4_K_repacked(q4_K.data(), ak.data(), kBlocks256, group)),
                bits(avx2::dot_q4_K_repacked(q4_K.data(), ak.data(), kBlocks256, group)));
  }
}

// The repacked Q4_K product's 4-row kernel rounds after every 64 elements, its 1-row kernel
// after every 256: the same exact sums, so equal to rounding, not always to the bit.
TEST(GgmlProducts, RepackedQ4KKernelsAgreeToRounding) {
  std::mt19937 rng(3);
  int differing = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> x = random_row(rng, 1024);
    std::vector<BlockQ8_K> a(4);
    quantize_q8_K(x.data(), a.data(), 1024, false);
    const auto w = random_blocks<gguf::BlockQ4_K>(rng, 4);
    const float one_row = dot_q4_K_repacked(w.data(), a.data(), 4, false);
    const float grouped = dot_q4_K_repacked(w.data(), a.data(), 4, true);
    EXPECT_NEAR(one_row, grouped, 1e-4f * std::max(1.0f, std::fabs(one_row)));
    differing += bits(one_row) != bits(grouped);
  }
  EXPECT_GT(differing, 0) << "the two accumulation orders never differed: the test does not see them";
}

TEST(GgmlQuantize, Q8_0AndQ8_1AreTheAvx2Quantizer) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.1f * static_cast<float>(i - 16);  // max |x| = 1.6 at -1.6
  BlockQ8_0 q8;
  BlockQ8_1 q81;
  quantize_q8_0(x.data(), &q8, 32);
  quantize_q8_1(x.data(), &q81, 32);
  EXPECT_EQ(q8.d, fp32_to_fp16(1.6f / 127.f));
  const float id = 127.f / 1.6f;
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    const int code = static_cast<int>(std::nearbyint(x[i] * id));
    EXPECT_EQ(q8.qs[i], code) << i;
    EXPECT_EQ(q81.qs[i], code) << i;
    sum += code;
  }
  EXPECT_EQ(q8.qs[0], -127);
  EXPECT_EQ(q81.s, fp32_to_fp16((1.6f / 127.f) * static_cast<float>(sum)));
}

// quantize_row_q8_K_ref scales by the first element of largest magnitude (-127 / max); the
// 4-row quantizer of the repacked Q4_K product prefers a positive one when both signs reach it.
TEST(GgmlQuantize, Q8KSignRules) {
  std::vector<float> x(256, 0.25f);
  x[3] = -2.0f;
  x[100] = 2.0f;
  BlockQ8_K ref, grouped;
  quantize_q8_K(x.data(), &ref, 256, false);
  quantize_q8_K(x.data(), &grouped, 256, true);
  EXPECT_FLOAT_EQ(ref.d, 1 / (-127.f / -2.0f));
  EXPECT_FLOAT_EQ(grouped.d, 1 / (-127.f / 2.0f));
  EXPECT_EQ(ref.qs[3], -127);
  EXPECT_EQ(ref.qs[100], 127);
  EXPECT_EQ(grouped.qs[3], 127);
  EXPECT_EQ(grouped.qs[100], -127);
  int16_t sum0 = 0;
  for (int i = 0; i < 16; ++i) sum0 = static_cast<int16_t>(sum0 + ref.qs[i]);
  EXPECT_EQ(ref.bsums[0], sum0);
  // Without a tie both rules agree.
  x[100] = 1.0f;
  quantize_q8_K(x.data(), &ref, 256, false);
  quantize_q8_K(x.data(), &grouped, 256, true);
  EXPECT_EQ(std::memcmp(&ref, &grouped, sizeof ref), 0);
}

TEST(GgmlMath, VectorExponentialsAreExponentials) {
  for (Build build : {Build::Avx2, Build::Avx512}) {
    SCOPED_TRACE(build_name(build));
    EXPECT_EQ(vector_expf(build, 0.0f), 1.0f);
    EXPECT_EQ(vector_expf(build, -INFINITY), 0.0f);
    EXPECT_EQ(vector_expf(build, -200.0f), 0.0f);
    EXPECT_EQ(vector_expf(build, 100.0f), INFINITY);
    // ggml's routine is within 1.45 ulp + 0.5 (its comment); check 2 ulp over softmax's range.
    for (float x = -87.0f; x <= 88.0f; x += 0.01171875f) {
      const float e = std::exp(x), v = vector_expf(build, x);
      EXPECT_LE(std::fabs(v - e), 2.0f * (std::nextafter(e, INFINITY) - e)) << x;
    }
    // Subnormal results, where the two builds scale by 2^n in different ways.
    for (float x = -103.0f; x <= -87.5f; x += 0.5f) EXPECT_NEAR(vector_expf(build, x), std::exp(x), 2e-45f) << x;
  }
}

TEST(GgmlMath, GeluTableIsTheTanhGelu) {
  const uint16_t* table = gelu_table();
  for (float x : {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 1.0f, 2.5f}) {
    const double g = 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
    EXPECT_NEAR(fp16_to_fp32(table[fp32_to_fp16(x)]), g, 2e-3 * std::max(1.0, std::fabs(g))) << x;
  }
  EXPECT_EQ(geglu(-11.0f, 2.0f), 0.0f);
  EXPECT_EQ(geglu(12.0f, 0.5f), 6.0f);
}

// A synthetic KV pool for attention: `cells` consecutive positions of one sequence, one page per
// 16 cells, and T query rows at the last T positions.
struct KvFixture {
  int hd, n_kv_heads, n_heads, cells, T;
  std::vector<uint16_t> pool;
  std::vector<int32_t> cell_pos, page_rows, pages, positions;
  std::vector<float> q;
  KvFixture(int head_dim, int kv_heads, int heads, int n_cells, int rows, std::mt19937& rng)
      : hd(head_dim), n_kv_heads(kv_heads), n_heads(heads), cells(n_cells), T(rows) {
    const int page = 16, n_pages = (cells + page - 1) / page;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    pool.resize(static_cast<size_t>(n_pages) * page * 2 * n_kv_heads * hd);
    for (uint16_t& h : pool) h = fp32_to_fp16(normal(rng));
    cell_pos.assign(static_cast<size_t>(n_pages) * page, std::numeric_limits<int32_t>::max());
    for (int c = 0; c < cells; ++c) cell_pos[c] = c;
    for (int t = 0; t < T; ++t) {
      page_rows.push_back(static_cast<int32_t>(pages.size()));
      for (int p = 0; p < n_pages; ++p) pages.push_back(p);
      positions.push_back(cells - T + t);
    }
    page_rows.push_back(static_cast<int32_t>(pages.size()));
    q = random_row(rng, static_cast<size_t>(T) * n_heads * hd);
  }
  backend::PagedKv view(int window, bool scale_queries) const {
    const size_t row_bytes = 2 * static_cast<size_t>(n_kv_heads) * hd * sizeof(uint16_t);
    return {pool.data(), pool.data() + static_cast<size_t>(n_kv_heads) * hd, row_bytes, DType::F16, n_kv_heads, hd,
            window, 16, cell_pos.data(), page_rows.data(), pages.data(), scale_queries};
  }
  backend::TensorRef queries() const {
    return {const_cast<float*>(q.data()), DType::F32, T, static_cast<int64_t>(n_heads) * hd,
            static_cast<size_t>(n_heads) * hd * sizeof(float)};
  }
};

TEST(GgmlAttention, Avx2GivesThePortableBits) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2/FMA/F16C here";
  std::mt19937 rng(7);
  ThreadPool pool(2);
  struct Case {
    int hd, kv_heads, heads, cells, T, window;
    bool scale_queries;
  };
  for (const Case& c : {Case{64, 3, 9, 100, 1, 0, false}, Case{64, 3, 9, 100, 5, 0, false},
                        Case{256, 1, 4, 300, 1, 64, true}, Case{256, 1, 4, 77, 3, 0, true}, Case{64, 2, 2, 33, 1, 0, false}}) {
    SCOPED_TRACE(testing::Message() << "head " << c.hd << ", " << c.cells << " cells, " << c.T << " rows");
    const KvFixture kv(c.hd, c.kv_heads, c.heads, c.cells, c.T, rng);
    for (Build build : {Build::Avx2, Build::Avx512}) {
      std::vector<float> a(kv.q.size()), b(kv.q.size());
      const backend::TensorRef out_a{a.data(), DType::F32, c.T, kv.queries().cols, kv.queries().row_stride};
      const backend::TensorRef out_b{b.data(), DType::F32, c.T, kv.queries().cols, kv.queries().row_stride};
      portable::attention(build, pool, kv.queries(), kv.view(c.window, c.scale_queries), kv.positions.data(), 0.125f,
                          c.scale_queries, out_a);
      avx2::attention(build, pool, kv.queries(), kv.view(c.window, c.scale_queries), kv.positions.data(), 0.125f,
                      c.scale_queries, out_b);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << build_name(build);
    }
  }
}

// Against attention in double: ggml's roundings (f16 queries and weights) stay within f16 error.
TEST(GgmlAttention, IsAttention) {
  std::mt19937 rng(9);
  ThreadPool pool(1);
  const KvFixture kv(64, 2, 4, 70, 2, rng);
  for (Build build : {Build::Avx2, Build::Avx512}) {
    std::vector<float> out(kv.q.size());
    const backend::TensorRef o{out.data(), DType::F32, kv.T, kv.queries().cols, kv.queries().row_stride};
    attention(build, pool, kv.queries(), kv.view(0, false), kv.positions.data(), 0.125f, false, o);
    for (int t = 0; t < kv.T; ++t)
      for (int h = 0; h < kv.n_heads; ++h) {
        const int g = h / 2;
        std::vector<double> w;
        double max = -1e300, sum = 0;
        for (int c = 0; c <= kv.positions[t]; ++c) {
          double s = 0;
          for (int d = 0; d < kv.hd; ++d)
            s += static_cast<double>(kv.q[(t * kv.n_heads + h) * kv.hd + d]) *
                 fp16_to_fp32(kv.pool[(static_cast<size_t>(c) * 2 * kv.n_kv_heads + g) * kv.hd + d]);
          w.push_back(s * 0.125);
          max = std::max(max, w.back());
        }
        for (double& v : w) sum += (v = std::exp(v - max));
        for (int d = 0; d < kv.hd; ++d) {
          double y = 0;
          for (size_t c = 0; c < w.size(); ++c)
            y += w[c] / sum * fp16_to_fp32(kv.pool[((c * 2 + 1) * kv.n_kv_heads + g) * kv.hd + d]);
          EXPECT_NEAR(out[(t * kv.n_heads + h) * kv.hd + d], y, 3e-3) << t << " " << h << " " << d;
        }
      }
  }
}

TEST(GgmlBackend, RefusesWhatItCannotReproduce) {
  GgmlCpuBackend backend(1, Build::Avx2);
  std::vector<float> x(64, 1.0f), y(64);
  std::vector<uint8_t> weight(64 * 2 * 64);
  const backend::TensorRef in{x.data(), DType::F32, 1, 64, 64 * sizeof(float)};
  const backend::TensorRef out{y.data(), DType::F32, 1, 64, 64 * sizeof(float)};
  const backend::TensorRef f16_weight{weight.data(), DType::F16, 64, 64, 64 * 2};
  expect_error(ErrorCode::Unsupported, "f16", [&] { backend.matmul(in, f16_weight, nullptr, out); });
  // A matrix it cannot multiply is refused when the weights are placed, by name.
  const backend::TensorRef q5_k{weight.data(), DType::Q5_K, 2, 256, 176};
  expect_error(ErrorCode::Unsupported, "blk.0.ffn_down.weight",
               [&] { backend.place_weight(q5_k, "blk.0.ffn_down.weight"); });
  EXPECT_NO_THROW(backend.place_weight(q5_k, "token_embd.weight"));  // only looked up
  EXPECT_THROW(parse_build("ggml-neon"), Error);
  EXPECT_EQ(parse_build("ggml-avx2"), Build::Avx2);
  EXPECT_EQ(parse_build("ggml-avx512"), Build::Avx512);
}

}  // namespace
}  // namespace cellm::cpu::ggml
