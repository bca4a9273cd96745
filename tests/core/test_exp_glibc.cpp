// The batched exp gives std::exp's bits (glibc's expf) on every input that matters: a sweep of
// every float in the softmax range [-110, 0] at a stride, random floats of all magnitudes, and
// the edges (underflow, overflow, NaN, infinities, zeros, subnormals).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/exp_glibc.h"
#include "core/half.h"
#include "batched_libm_support.h"

namespace cellm {
namespace {

void expect_like_std_exp(const std::vector<float>& x) {
  testing::expect_same_bits(exp_in_place, [](float v) { return std::exp(v); }, "exp", x);
}

TEST(ExpGlibc, EveryFloatOfTheSoftmaxRangeAtAStride) {
  std::vector<float> x;
  // Floats from -110 up to 0: their bit patterns, every 11th (about a million values).
  x.reserve(1'100'000);
  for (uint32_t bits = float_to_bits(-110.0f); bits > 0x80000000u; bits -= 11) x.push_back(bits_to_float(bits));
  expect_like_std_exp(x);
}

TEST(ExpGlibc, RandomFloatsAndEdges) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> x;
  for (int i = 0; i < 2'000'000; ++i) x.push_back(bits_to_float(any(rng)));  // every magnitude, NaNs too
  std::uniform_real_distribution<float> range(-104.0f, 89.0f);
  for (int i = 0; i < 2'000'000; ++i) x.push_back(range(rng));
  const float inf = std::numeric_limits<float>::infinity();
  for (float e : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), -0x1.9fe368p6f, -0x1.9fe36ap6f,
                  -0x1.9fe366p6f, 0x1.62e42ep6f, 0x1.62e430p6f, -88.0f, -87.9f, -103.5f, 1e-30f, -1e-30f,
                  std::numeric_limits<float>::denorm_min(), 1.0f, -1.0f})
    x.push_back(e);
  for (size_t pad = 0; pad < 3; ++pad) x.push_back(-1.5f);  // a length that is not a multiple of 4
  expect_like_std_exp(x);
}

}  // namespace
}  // namespace cellm
