// Quantization: hand-computed blocks (rounding rules and packing), error bounds of the round
// trip through dequantize_row, and edge cases (zero and constant blocks, bad sizes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "gguf/dequantize.h"
#include "gguf/quant_blocks.h"
#include "gguf/quantize.h"
#include "common/expect_error.h"

namespace cellm::gguf {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

std::vector<float> round_trip(DType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> bytes(row_bytes(type, n));
  quantize_row(type, x.data(), bytes.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(type, bytes.data(), y.data(), n);
  return y;
}

// Mean over blocks of (RMS error / RMS of the block): scale-free, so one bound fits all data.
double mean_relative_rms_error(const std::vector<float>& x, const std::vector<float>& y, size_t block) {
  double total = 0;
  for (size_t start = 0; start < x.size(); start += block) {
    double error = 0, energy = 0;
    for (size_t i = start; i < start + block; ++i) {
      error += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
      energy += double{x[i]} * x[i];
    }
    total += std::sqrt(error / energy);
  }
  return total / static_cast<double>(x.size() / block);
}

struct ErrorBound {
  DType type;
  double bound;  // about 1.15x what cellm reaches on this data
};

TEST(QuantizeDequantize, RoundTripErrorStaysWithinTheFormatsPrecision) {
  // Blocks of Gaussian values at scales from 1e-3 to 1e3, 64 super-blocks.
  std::vector<float> x = gaussian(64 * 256, 7);
  for (size_t b = 0; b < 64; ++b)
    for (size_t i = 0; i < 256; ++i) x[b * 256 + i] *= std::pow(10.0f, static_cast<float>(b % 7) - 3.0f);
  const ErrorBound bounds[] = {
      {DType::Q8_0, 0.0063}, {DType::Q4_0, 0.099}, {DType::Q4_1, 0.090}, {DType::Q5_0, 0.050},
      {DType::Q5_1, 0.044},  {DType::Q4_K, 0.082}, {DType::Q5_K, 0.041}, {DType::Q6_K, 0.020},
      {DType::Q8_K, 0.0079}, {DType::F16, 2.5e-4}, {DType::BF16, 2.0e-3},
  };
  for (const auto& [type, bound] : bounds) {
    const double error = mean_relative_rms_error(x, round_trip(type, x), 256);
    EXPECT_LT(error, bound) << dtype_name(type);
  }
}

TEST(QuantizeDequantize, KQuantScaleSearchBeatsPlainMinMaxRounding) {
  // Q4_K/Q5_K spend fewer bits on scales than Q4_1/Q5_1; the least-squares search must more
  // than make up for it.
  const std::vector<float> x = gaussian(64 * 256, 11);
  const double q4_k = mean_relative_rms_error(x, round_trip(DType::Q4_K, x), 256);
  const double q4_1 = mean_relative_rms_error(x, round_trip(DType::Q4_1, x), 256);
  const double q5_k = mean_relative_rms_error(x, round_trip(DType::Q5_K, x), 256);
  const double q5_1 = mean_relative_rms_error(x, round_trip(DType::Q5_1, x), 256);
  EXPECT_LT(q4_k, 0.95 * q4_1);
  EXPECT_LT(q5_k, q5_1);
}

TEST(QuantizeDequantize, Q8_0RoundsHalvesAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = -127.0f;  // largest magnitude: scale exactly 1
  x[1] = 0.5f;
  x[2] = -0.5f;
  x[3] = 1.5f;
  x[4] = 2.49f;
  x[5] = 126.5f;
  BlockQ8_0 block;
  quantize_row(DType::Q8_0, x.data(), &block, 32);
  EXPECT_EQ(block.d, 0x3C00);
  const int8_t expected[6] = {-127, 1, -1, 2, 2, 127};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(block.qs[j], expected[j]) << "element " << j;
}

TEST(QuantizeDequantize, Q4_0MapsTheLargestMagnitudeToLevelZeroAndPacksNibbles) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;  // scale 1: level = trunc(x + 8.5)
  x[16] = 7.0f;
  x[1] = 0.5f;
  x[17] = -0.5f;
  BlockQ4_0 block;
  quantize_row(DType::Q4_0, x.data(), &block, 32);
  EXPECT_EQ(block.d, 0x3C00);
  EXPECT_EQ(block.qs[0], 0xF0);  // levels 0 and 15
  EXPECT_EQ(block.qs[1], 0x89);  // levels 9 and 8
  EXPECT_EQ(block.qs[2], 0x88);
}

TEST(QuantizeDequantize, Q5_0SetsTheFifthBits) {
  std::vector<float> x(32, 0.0f);  // level 16, fifth bit set
  x[0] = -16.0f;                    // level 0
  x[3] = -1.0f;                     // level 15
  x[31] = 15.0f;                    // level 31
  BlockQ5_0 block;
  quantize_row(DType::Q5_0, x.data(), &block, 32);
  EXPECT_EQ(block.d, 0x3C00);
  const uint8_t qh[4] = {0xF6, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(std::memcmp(block.qh, qh, 4), 0);
  EXPECT_EQ(block.qs[3], 0x0F);   // element 3 level 15, element 19 level 16
  EXPECT_EQ(block.qs[15], 0xF0);  // element 15 level 16, element 31 level 31
}

TEST(QuantizeDequantize, Q4_1StoresTheMinimumAndRange) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = -2.0f + static_cast<float>(j % 16);  // levels 0..15, scale 1
  BlockQ4_1 block;
  quantize_row(DType::Q4_1, x.data(), &block, 32);
  EXPECT_EQ(block.d, 0x3C00);
  EXPECT_EQ(block.m, 0xC000);  // -2
  for (int j = 0; j < 16; ++j) EXPECT_EQ(block.qs[j], j | (j << 4)) << "byte " << j;
}

TEST(QuantizeDequantize, ExactlyRepresentableBlocksSurviveUnchanged) {
  std::vector<float> q8(32), q4(32);
  for (int j = 0; j < 32; ++j) {
    q8[j] = 0.25f * static_cast<float>(j * 8 - 127);  // levels -127..121, scale 0.25
    q4[j] = 0.5f * static_cast<float>(j % 16 - 8);    // levels -8..7, scale 0.5
  }
  EXPECT_EQ(round_trip(DType::Q8_0, q8), q8);
  EXPECT_EQ(round_trip(DType::Q4_0, q4), q4);
  EXPECT_EQ(round_trip(DType::Q4_1, q4), q4);
}

TEST(QuantizeDequantize, RequantizingIsStableForSymmetricFormats) {
  const std::vector<float> x = gaussian(32 * 64, 3);
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
    const std::vector<float> once = round_trip(type, x);
    EXPECT_EQ(round_trip(type, once), once) << dtype_name(type);
  }
}

TEST(QuantizeDequantize, ZeroAndConstantBlocksComeBackExactly) {
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K, DType::Q8_K, DType::F16, DType::BF16}) {
    const std::vector<float> zeros(256, 0.0f);
    const std::vector<float> y = round_trip(type, zeros);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(type);
    const std::vector<float> constant(256, -1.5f);
    const std::vector<float> c = round_trip(type, constant);
    for (float v : c) ASSERT_NEAR(v, -1.5f, 1e-2f) << dtype_name(type);
  }
}

TEST(QuantizeDequantize, Q8_KKeepsSumsOfSixteen) {
  const std::vector<float> x = gaussian(256, 5);
  BlockQ8_K block;
  quantize_row(DType::Q8_K, x.data(), &block, 256);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += block.qs[16 * g + l];
    EXPECT_EQ(block.bsums[g], sum) << "group " << g;
  }
}

TEST(QuantizeDequantize, RefusesPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> out(4096);
  expect_error(ErrorCode::InvalidArgument, "q6_K", [&] { quantize_row(DType::Q6_K, x.data(), out.data(), 300); });
  expect_error(ErrorCode::InvalidArgument, "q4_0", [&] { quantize_row(DType::Q4_0, x.data(), out.data(), 31); });
  expect_error(ErrorCode::Unsupported, "q3_K", [&] { quantize_row(DType::Q3_K, x.data(), out.data(), 256); });
  EXPECT_FALSE(can_quantize(DType::Q2_K));
  EXPECT_TRUE(can_quantize(DType::Q4_K));
}

}  // namespace
}  // namespace cellm::gguf
