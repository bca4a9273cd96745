// Batch invariance (DESIGN.md section 6): a row's outputs are bit-identical whether it is
// computed alone or among 36 other rows, on one thread or two.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "backend/cpu/matmul.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

class MatmulInvariance : public ::testing::TestWithParam<std::tuple<DType, MatmulIsa>> {};

TEST_P(MatmulInvariance, EachRowIsBitIdenticalToItsOwnSingleRowRun) {
  const auto [type, isa] = GetParam();
  const int64_t block = dtype_info(type).block_size;
  const int64_t cols = block == 1 ? 77 : block == 32 ? 320 : 512;
  const int64_t rows = 45;
  const int64_t T = 37;
  const int64_t x_stride = cols + 3;
  const int64_t out_stride = rows + 5;
  const auto w = test::random_weights(type, rows, cols, 7);
  const auto x = test::random_activations(T, cols, x_stride, 8);
  MatmulScratch scratch;

  std::vector<std::vector<float>> batched;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> out(T * out_stride, 0.0f);
    matmul(isa, pool, w.matrix, x.data(), x_stride, T, out.data(), out_stride, nullptr, scratch);
    batched.push_back(out);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> single(rows);
      matmul(isa, pool, w.matrix, x.data() + t * x_stride, x_stride, 1, single.data(), rows, nullptr, scratch);
      ASSERT_EQ(std::memcmp(single.data(), out.data() + t * out_stride, rows * sizeof(float)), 0)
          << "token " << t << " with " << threads << " thread(s) differs from its T=1 run";
    }
  }
  for (int64_t t = 0; t < T; ++t)
    ASSERT_EQ(std::memcmp(batched[0].data() + t * out_stride, batched[1].data() + t * out_stride, rows * sizeof(float)), 0)
        << "token " << t << ": 1 and 2 threads differ";
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulInvariance,
                         testing::Combine(testing::ValuesIn(test::matmul_weight_types()),
                                          testing::ValuesIn(test::available_isas())),
                         test::format_and_isa_name);

}  // namespace
}  // namespace cellm::cpu
