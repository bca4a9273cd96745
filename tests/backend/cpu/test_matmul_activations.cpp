// The activation quantizers: llama.cpp's definitions, and the same bytes from the portable and
// the SIMD code (so every ISA path multiplies the same integers).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_activations.h"
#include "core/error.h"
#include "core/half.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

struct QuantizedBuffers {
  explicit QuantizedBuffers(int64_t cols) : qs(cols), d(cols / 32), s(cols / 32), bsums(cols / 16) {}
  QuantizedRow row() { return {qs.data(), d.data(), s.data(), bsums.data()}; }
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  std::vector<int16_t> bsums;
};

// Values that land exactly on .5 after scaling, so the rounding rule shows.
std::vector<float> activations_with_ties(int64_t cols) {
  std::vector<float> x = test::random_activations(1, cols, cols, 3);
  for (int64_t b = 0; b < cols / 32; b += 2) {
    x[32 * b] = 127.0f;  // amax 127: the scale is exactly 1
    for (int j = 1; j < 32; ++j) x[32 * b + j] = static_cast<float>(j % 9) - 4.5f;
  }
  return x;
}

TEST(MatmulActivations, SimdAndPortableQuantizersWriteTheSameBytes) {
  if (!matmul_isa_available(MatmulIsa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t cols = 1024;
  const auto x = activations_with_ties(cols);
  for (auto format : {ActivationFormat::Q8_0, ActivationFormat::Q8_1, ActivationFormat::Q8_K}) {
    QuantizedBuffers portable(cols), simd(cols);
    quantize_activation_row(format, x.data(), cols, portable.row(), MatmulIsa::Portable);
    quantize_activation_row(format, x.data(), cols, simd.row(), MatmulIsa::Avx2);
    const int64_t blocks = cols / activation_block_size(format);
    EXPECT_EQ(portable.qs, simd.qs);
    EXPECT_EQ(std::memcmp(portable.d.data(), simd.d.data(), blocks * sizeof(float)), 0);
    if (format == ActivationFormat::Q8_1) {
      EXPECT_EQ(portable.s, simd.s);
    }
    if (format == ActivationFormat::Q8_K) {
      EXPECT_EQ(portable.bsums, simd.bsums);
    }
  }
}

TEST(MatmulActivations, Q8_0RoundsHalfToEvenWithAnFp16Scale) {
  const int64_t cols = 64;
  const auto x = activations_with_ties(cols);
  QuantizedBuffers q(cols);
  quantize_activation_row(ActivationFormat::Q8_0, x.data(), cols, q.row(), MatmulIsa::Portable);
  EXPECT_EQ(q.d[0], 1.0f);
  for (int j = 1; j < 32; ++j) EXPECT_EQ(q.qs[j], static_cast<int8_t>(std::nearbyint(x[j]))) << j;
  EXPECT_EQ(q.qs[5], 0);  // 0.5 and 2.5 round to even, not away from zero
  EXPECT_EQ(q.qs[7], 2);
  // The second block: codes within half a step of the input, d an fp16 value.
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(q.d[1])), q.d[1]);
  for (int j = 32; j < 64; ++j) EXPECT_LE(std::fabs(q.qs[j] * q.d[1] - x[j]), 0.51f * q.d[1] + 1e-3f) << j;
}

TEST(MatmulActivations, Q8_1SumIsTheFp16OfScaleTimesCodeSum) {
  const int64_t cols = 256;
  const auto x = test::random_activations(1, cols, cols, 5);
  QuantizedBuffers q(cols);
  quantize_activation_row(ActivationFormat::Q8_1, x.data(), cols, q.row(), MatmulIsa::Portable);
  for (int64_t b = 0; b < cols / 32; ++b) {
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += q.qs[32 * b + j];
    EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(q.s[b])), q.s[b]);
    EXPECT_NEAR(q.s[b], q.d[b] * sum, std::fabs(q.d[b] * sum) * 2e-3 + 1e-6) << b;
  }
}

TEST(MatmulActivations, Q8_KMapsTheLargestMagnitudeToMinus127AndSumsGroups) {
  const int64_t cols = 512;
  auto x = test::random_activations(1, cols, cols, 9);
  x[300] = -50.0f;  // the second super-block's largest value is negative
  std::fill(x.begin(), x.begin() + 256, 0.0f);  // the first is all zeros
  QuantizedBuffers q(cols);
  quantize_activation_row(ActivationFormat::Q8_K, x.data(), cols, q.row(), MatmulIsa::Portable);
  EXPECT_EQ(q.d[0], 0.0f);
  for (int j = 0; j < 256; ++j) ASSERT_EQ(q.qs[j], 0);
  EXPECT_EQ(q.qs[300], -127);
  EXPECT_FLOAT_EQ(q.d[1], 50.0f / 127.0f);
  for (int g = 0; g < cols / 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += q.qs[16 * g + j];
    EXPECT_EQ(q.bsums[g], sum) << g;
  }
}

TEST(MatmulActivations, RejectsPartialBlocks) {
  std::vector<float> x(48, 1.0f);
  QuantizedBuffers q(64);
  EXPECT_THROW(quantize_activation_row(ActivationFormat::Q8_0, x.data(), 48, q.row(), MatmulIsa::Portable), Error);
}

}  // namespace
}  // namespace cellm::cpu
