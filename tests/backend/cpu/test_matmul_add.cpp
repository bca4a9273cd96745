// Backend::matmul_add (the program's MatMulAdd: residual + x . w^T) is, bit for bit, a matmul
// into the output followed by add(residual, output): backends that fuse it (CUDA, one row)
// must give these bits, and the CPU computes exactly this.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

using backend::TensorRef;

TEST(MatmulAdd, IsTheMatmulThenTheResidualAdd) {
  CpuBackend cpu(2);
  for (DType type : {DType::Q4_1, DType::Q4_K, DType::F16}) {
    const int64_t cols = 256, rows = 24;
    const auto w = test::random_weights(type, rows, cols, 7);
    const TensorRef wr{const_cast<void*>(w.matrix.data), type, rows, cols, w.matrix.row_bytes};
    for (int64_t T : {1, 3}) {
      const auto x = test::random_activations(T, cols, cols, 8);
      const auto residual = test::random_activations(T, rows, rows, 9);
      auto ref = [&](const std::vector<float>& v, int64_t c) {
        return TensorRef{const_cast<float*>(v.data()), DType::F32, T, c, c * sizeof(float)};
      };
      std::vector<float> fused(T * rows), apart(T * rows);
      cpu.matmul_add(ref(x, cols), wr, ref(residual, rows), ref(fused, rows));
      cpu.matmul(ref(x, cols), wr, nullptr, ref(apart, rows));
      for (int64_t i = 0; i < T * rows; ++i) apart[i] = residual[i] + apart[i];
      EXPECT_EQ(std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)), 0)
          << dtype_name(type) << " T=" << T;
    }
  }
}

}  // namespace
}  // namespace cellm::cpu
