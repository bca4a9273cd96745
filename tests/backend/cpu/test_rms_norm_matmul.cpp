// Backend::rms_norm_matmul (the executor's call for a whole-row RmsNorm followed by a MatMul of
// its output) is, bit for bit, rms_norm into `normed` and then matmul of `normed`: backends
// that fuse it (CUDA quantizes the product's activations in the norm's kernel) must give these
// bits, and the CPU computes exactly this.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

using backend::TensorRef;

TEST(RmsNormMatmul, IsTheNormThenTheProductOfItsOutput) {
  CpuBackend cpu(2);
  const int64_t cols = 512, rows = 24;
  const auto norm_weight = test::random_activations(1, cols, cols, 3);
  for (DType type : {DType::Q4_K, DType::Q8_0, DType::F16}) {
    const auto w = test::random_weights(type, rows, cols, 7);
    const TensorRef wr{const_cast<void*>(w.matrix.data), type, rows, cols, w.matrix.row_bytes};
    for (int64_t T : {1, 3}) {
      const auto x = test::random_activations(T, cols, cols, 8);
      auto ref = [&](const std::vector<float>& v, int64_t c) {
        return TensorRef{const_cast<float*>(v.data()), DType::F32, T, c, c * sizeof(float)};
      };
      std::vector<float> normed(T * cols), out(T * rows), normed_apart(T * cols), out_apart(T * rows);
      cpu.rms_norm_matmul(ref(x, cols), norm_weight.data(), 1e-6f, ref(normed, cols), wr, nullptr, ref(out, rows));
      cpu.rms_norm(ref(x, cols), norm_weight.data(), static_cast<int32_t>(cols), 1e-6f, ref(normed_apart, cols));
      cpu.matmul(ref(normed_apart, cols), wr, nullptr, ref(out_apart, rows));
      EXPECT_EQ(std::memcmp(normed.data(), normed_apart.data(), normed.size() * sizeof(float)), 0)
          << dtype_name(type) << " T=" << T;
      EXPECT_EQ(std::memcmp(out.data(), out_apart.data(), out.size() * sizeof(float)), 0)
          << dtype_name(type) << " T=" << T;
    }
  }
}

}  // namespace
}  // namespace cellm::cpu
