// The batched tanh gives std::tanh's bits (glibc's tanhf) everywhere: every float at a stride
// (all signs and magnitudes, NaNs included), and the edges of glibc's branches (of tanhf and of
// the expm1f under it). Checked once against all 2^32 inputs when it was written: no difference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/tanh_glibc.h"
#include "batched_libm_support.h"

namespace cellm {
namespace {

void expect_like_std_tanh(const std::vector<float>& x) {
  testing::expect_same_bits(tanh_in_place, [](float v) { return std::tanh(v); }, "tanh", x);
}

TEST(TanhGlibc, EveryFloatAtAStride) {
  std::vector<float> x;
  x.reserve(4'300'000);
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 1001) x.push_back(bits_to_float(static_cast<uint32_t>(bits)));
  expect_like_std_tanh(x);
}

TEST(TanhGlibc, TheEdgesOfGlibcsBranches) {
  std::vector<float> x;
  // Around each threshold of tanhf (2^-55, 1, 22) and of expm1f at 2|x| (2^-25, ln2 / 2,
  // 1.5 ln2, and the exponents where its reconstruction changes: k = 2, 23, 56), both signs.
  for (uint32_t edge : {0x24000000u, 0x3f800000u, 0x41b00000u, 0x32800000u, 0x3e317218u, 0x3f051592u, 0x3fb17218u,
                        0x41000000u, 0x41a00000u, 0x419b0000u})
    for (int d = -40; d <= 40; ++d)
      for (uint32_t sign : {0u, 0x80000000u}) x.push_back(bits_to_float((edge + static_cast<uint32_t>(d)) | sign));
  const float inf = std::numeric_limits<float>::infinity();
  for (float e : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(), 0.5f, -0.5f, 21.99f, 22.0f})
    x.push_back(e);
  x.push_back(0.25f);  // a length that is not a multiple of 16
  expect_like_std_tanh(x);
}

}  // namespace
}  // namespace cellm
