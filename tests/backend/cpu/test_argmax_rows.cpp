// CPU argmax_rows: the lowest index among equals, and NaNs never win wherever they stand (the
// CUDA kernel's rule; test_cuda_row_ops.cpp holds the two to the same answers).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace cellm::cpu {
namespace {

using backend::TensorRef;

std::vector<int32_t> argmax_of(std::vector<float> values, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(values.size()) / rows;
  CpuBackend cpu(1);
  std::vector<int32_t> out(static_cast<size_t>(rows));
  cpu.argmax_rows(TensorRef{values.data(), DType::F32, rows, cols, static_cast<size_t>(cols) * sizeof(float)},
                  out.data());
  return out;
}

TEST(ArgmaxRows, LowestIndexAmongEquals) {
  EXPECT_EQ(argmax_of({1, 3, 2, 3, -1, 0, 0, -1}, 2), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(argmax_of({-2, -2, -2, -2}, 1), (std::vector<int32_t>{0}));
}

TEST(ArgmaxRows, NaNsNeverWin) {
  EXPECT_EQ(argmax_of({NAN, 1, 5, NAN}, 1), (std::vector<int32_t>{2}));
  EXPECT_EQ(argmax_of({NAN, NAN, -INFINITY, NAN}, 1), (std::vector<int32_t>{2}));
  EXPECT_EQ(argmax_of({NAN, NAN, NAN}, 1), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace cellm::cpu
