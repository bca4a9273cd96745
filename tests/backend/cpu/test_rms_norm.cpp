// CPU RMSNorm: the order of its sum of squares (backend/rms_norm_order.h) is a contract with the
// CUDA kernel, so it is checked bit for bit against the definition written out plainly, for
// rows shorter than, equal to and longer than the partial count, and for grouped rows (the
// per-head norms); and against a plain double-precision RMSNorm to rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/rms_norm_order.h"
#include "core/half.h"

namespace cellm::cpu {
namespace {

// The definition, one step at a time.
double defined_sum_of_squares(const float* x, int n) {
  constexpr int kParts = backend::kRmsNormPartials;
  std::vector<double> part(kParts, 0.0);
  for (int i = 0; i < n; ++i) part[i % kParts] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  std::vector<double> runs;
  for (int w = 0; w < kParts; w += 32) {
    for (int s = 16; s >= 1; s /= 2)
      for (int l = 0; l < s; ++l) part[w + l] += part[w + l + s];
    runs.push_back(part[w]);
  }
  for (size_t s = runs.size() / 2; s >= 1; s /= 2)
    for (size_t w = 0; w < s; ++w) runs[w] += runs[w + s];
  return runs[0];
}

TEST(CpuRmsNorm, GivesTheDefinedSumOrderBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto [cols, group] : {std::pair{100, 100}, {256, 256}, {576, 576}, {1000, 1000}, {4096, 4096}, {1024, 128}}) {
    SCOPED_TRACE(testing::Message() << cols << " columns in groups of " << group);
    const int rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * cols)), w(static_cast<size_t>(group)), y(x.size());
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = normal(rng);
    ThreadPool pool(2);
    const backend::TensorRef xr{x.data(), DType::F32, rows, cols, cols * sizeof(float)};
    const backend::TensorRef yr{y.data(), DType::F32, rows, cols, cols * sizeof(float)};
    const float eps = 1e-6f;
    rms_norm(pool, xr, w.data(), group, eps, yr);
    double worst = 0;
    for (int r = 0; r < rows; ++r)
      for (int g = 0; g < cols; g += group) {
        const float* xs = &x[static_cast<size_t>(r * cols + g)];
        const float mean = static_cast<float>(defined_sum_of_squares(xs, group) / group);
        const float inv = 1.0f / std::sqrt(mean + eps);
        double plain = 0;
        for (int i = 0; i < group; ++i) plain += static_cast<double>(xs[i]) * xs[i];
        const double plain_inv = 1.0 / std::sqrt(plain / group + eps);
        for (int i = 0; i < group; ++i) {
          const float got = y[static_cast<size_t>(r * cols + g + i)];
          ASSERT_EQ(float_to_bits(got), float_to_bits((xs[i] * inv) * w[i])) << "row " << r << " element " << g + i;
          worst = std::max(worst, std::abs(got - xs[i] * plain_inv * w[i]) / (std::abs(xs[i] * plain_inv * w[i]) + 1e-3));
        }
      }
    EXPECT_LT(worst, 1e-5);
  }
}

}  // namespace
}  // namespace cellm::cpu
