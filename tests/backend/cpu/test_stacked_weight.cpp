// Stacked projections on the CPU stay where the file maps them: the placed weight points at
// its parts (no copy, so a process holds its weights once) and computes what the joined
// matrix computes. The joining helper for copying backends refuses a backend that would keep
// its short-lived staging buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/expect_error.h"
#include "core/error.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

using backend::TensorRef;

TensorRef ref_of(const WeightMatrix& w, int64_t first_row, int64_t rows) {
  auto* data = const_cast<uint8_t*>(static_cast<const uint8_t*>(w.data)) + first_row * w.row_bytes;
  return {data, w.type, rows, w.cols, w.row_bytes};
}

TEST(StackedWeight, CpuKeepsThePartsInPlaceAndComputesTheJoinedProduct) {
  const int64_t cols = 256, rows = 48, T = 5;
  const auto joined = test::random_weights(DType::Q4_1, rows, cols, 3);
  const std::vector<TensorRef> parts = {ref_of(joined.matrix, 0, 32), ref_of(joined.matrix, 32, 8),
                                        ref_of(joined.matrix, 40, 8)};
  CpuBackend cpu(2);
  const TensorRef stacked = cpu.place_stacked_weight(parts, "q+k+v");
  EXPECT_EQ(stacked.rows, rows);
  EXPECT_EQ(stacked.cols, cols);
  EXPECT_EQ(stacked.data, nullptr);
  ASSERT_EQ(stacked.part_count, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(stacked.parts[i].data, parts[i].data) << "part " << i << " was copied";

  const auto x = test::random_activations(T, cols, cols, 4);
  const TensorRef xs{const_cast<float*>(x.data()), DType::F32, T, cols, cols * sizeof(float)};
  std::vector<float> want(T * rows), got(T * rows);
  const TensorRef one = ref_of(joined.matrix, 0, rows);
  cpu.matmul(xs, one, nullptr, {want.data(), DType::F32, T, rows, rows * sizeof(float)});
  cpu.matmul(xs, stacked, nullptr, {got.data(), DType::F32, T, rows, rows * sizeof(float)});
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

TEST(StackedWeight, JoiningForABackendThatKeepsHostPointersFails) {
  const auto joined = test::random_weights(DType::Q8_0, 8, 64, 5);
  const std::vector<TensorRef> parts = {ref_of(joined.matrix, 0, 4), ref_of(joined.matrix, 4, 4)};
  CpuBackend cpu(1);  // its place_weight uses host memory in place: the staging would dangle
  // A placement into a buffer about to be freed is refused.
  expect_error(ErrorCode::Internal, "gate+up", [&] { backend::place_joined_copy(cpu, parts, "gate+up"); });
}

}  // namespace
}  // namespace cellm::cpu
