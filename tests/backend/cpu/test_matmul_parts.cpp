// A weight whose rows lie in several matrices (stacked projections used where the file maps
// them) gives, bit for bit, what one matrix holding all those rows gives: same outputs in the
// same columns, bias included, for every format and path, for one token and for many.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <span>
#include <tuple>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

class MatmulParts : public ::testing::TestWithParam<std::tuple<DType, MatmulIsa>> {};

TEST_P(MatmulParts, PartsGiveWhatTheJoinedMatrixGives) {
  const auto [type, isa] = GetParam();
  const int64_t block = dtype_info(type).block_size;
  const int64_t cols = block == 1 ? 77 : block == 32 ? 320 : 512;
  // Uneven parts, none a multiple of the driver's 16-row task unit: tasks never span parts.
  const std::vector<int64_t> part_rows = {37, 9, 50};
  int64_t rows = 0;
  for (int64_t r : part_rows) rows += r;
  const int64_t x_stride = cols + 3;
  const int64_t out_stride = rows + 5;
  const auto joined = test::random_weights(type, rows, cols, 11);
  std::vector<WeightMatrix> parts;
  int64_t first = 0;
  for (int64_t r : part_rows) {
    WeightMatrix part = joined.matrix;
    part.data = static_cast<const uint8_t*>(joined.matrix.data) + static_cast<size_t>(first) * part.row_bytes;
    part.rows = r;
    parts.push_back(part);
    first += r;
  }
  std::vector<float> bias(rows);
  for (int64_t n = 0; n < rows; ++n) bias[n] = 0.25f * static_cast<float>(n % 7) - 0.5f;
  MatmulScratch scratch;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t T : {1, 3, 70}) {
      const auto x = test::random_activations(T, cols, x_stride, 12);
      std::vector<float> want(T * out_stride, -7.0f), got(T * out_stride, -7.0f);
      matmul(isa, pool, joined.matrix, x.data(), x_stride, T, want.data(), out_stride, bias.data(), scratch);
      matmul(isa, pool, std::span<const WeightMatrix>(parts), x.data(), x_stride, T, got.data(), out_stride,
             bias.data(), scratch);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "T = " << T << ", " << threads << " thread(s)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulParts,
                         testing::Combine(testing::ValuesIn(test::matmul_weight_types()),
                                          testing::ValuesIn(test::available_isas())),
                         test::format_and_isa_name);

TEST(MatmulPartsApi, RefusesPartsThatAreNotOneWeight) {
  const auto a = test::random_weights(DType::Q8_0, 4, 64, 1);
  const auto b = test::random_weights(DType::Q4_0, 4, 64, 2);
  const auto c = test::random_weights(DType::Q8_0, 4, 32, 3);
  const auto x = test::random_activations(1, 64, 64, 4);
  std::vector<float> out(8);
  ThreadPool pool(1);
  MatmulScratch scratch;
  auto code_of = [&](std::vector<WeightMatrix> parts, int64_t out_stride) -> std::optional<ErrorCode> {
    try {
      matmul(pool, std::span<const WeightMatrix>(parts), x.data(), 64, 1, out.data(), out_stride, nullptr, scratch);
    } catch (const Error& e) {
      return e.code();
    }
    return std::nullopt;  // accepted
  };
  EXPECT_EQ(code_of({a.matrix, b.matrix}, 8), ErrorCode::InvalidArgument);  // types differ
  EXPECT_EQ(code_of({a.matrix, c.matrix}, 8), ErrorCode::InvalidArgument);  // widths differ
  EXPECT_EQ(code_of({a.matrix, a.matrix}, 7), ErrorCode::InvalidArgument);  // out narrower than all parts
  EXPECT_EQ(code_of({}, 8), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of({a.matrix, a.matrix}, 8), std::nullopt);
}

}  // namespace
}  // namespace cellm::cpu
