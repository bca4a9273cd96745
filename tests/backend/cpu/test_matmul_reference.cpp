// Every weight format on every ISA path this CPU has, against the double-precision reference.
#include <gtest/gtest.h>

#include <tuple>

#include "backend/cpu/matmul.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

struct Shape {
  int64_t cols, rows, tokens;
};

// One block, an odd number of 32-blocks (a lone last block in the 64-wide AVX-512 chunks),
// many blocks; rows not a multiple of any tile; T = 1, 3, 37 and 512.
std::vector<Shape> shapes_for(DType type) {
  const int64_t block = dtype_info(type).block_size;
  std::vector<int64_t> cols;
  if (block == 1) cols = {1, 7, 16, 37, 200};
  if (block == 32) cols = {32, 96, 1024};
  if (block == 256) cols = {256, 768};
  std::vector<Shape> shapes;
  for (int64_t k : cols)
    for (auto [n, t] : {std::pair<int64_t, int64_t>{1, 1}, {37, 1}, {5, 3}, {37, 37}, {19, 512}}) shapes.push_back({k, n, t});
  return shapes;
}

class MatmulReference : public ::testing::TestWithParam<std::tuple<DType, MatmulIsa>> {};

TEST_P(MatmulReference, AgreesWithDequantizedDoublePrecisionProduct) {
  const auto [type, isa] = GetParam();
  ThreadPool pool(2);
  MatmulScratch scratch;
  uint32_t seed = 1;
  for (const Shape& s : shapes_for(type)) {
    SCOPED_TRACE(testing::Message() << "cols " << s.cols << " rows " << s.rows << " T " << s.tokens);
    const auto w = test::random_weights(type, s.rows, s.cols, seed++);
    const auto x = test::random_activations(s.tokens, s.cols, s.cols, seed++);
    std::vector<float> out(s.tokens * s.rows, -1.0f);
    matmul(isa, pool, w.matrix, x.data(), s.cols, s.tokens, out.data(), s.rows, nullptr, scratch);
    const auto ref = test::reference_matmul(w.matrix, x.data(), s.cols, s.tokens);
    int failures = 0;
    for (size_t i = 0; i < out.size() && failures < 5; ++i) {
      if (std::fabs(out[i] - ref.value[i]) > ref.tolerance[i]) {
        ++failures;
        ADD_FAILURE() << "element " << i << " (t " << i / s.rows << ", n " << i % s.rows << "): " << out[i]
                      << " vs reference " << ref.value[i] << " (tolerance " << ref.tolerance[i] << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulReference,
                         testing::Combine(testing::ValuesIn(test::matmul_weight_types()),
                                          testing::ValuesIn(test::available_isas())),
                         test::format_and_isa_name);

}  // namespace
}  // namespace cellm::cpu
