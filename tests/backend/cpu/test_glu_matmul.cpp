// Backend::glu_matmul (the executor's call for a Glu followed by a MatMul or MatMulAdd of its
// output) is, bit for bit, glu into `glu_out` and then matmul (or matmul_add) of `glu_out`:
// backends that fuse it (CUDA quantizes the product's activations in the GLU's kernel) must give
// these bits, and the CPU computes exactly this.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

using backend::TensorRef;

TEST(GluMatmul, IsTheActivationThenTheProductOfItsOutput) {
  CpuBackend cpu(2);
  const int64_t cols = 512, rows = 24, T = 3;
  const auto gate = test::random_activations(T, cols, cols, 4), up = test::random_activations(T, cols, cols, 5);
  const auto residual = test::random_activations(T, rows, rows, 6);
  auto ref = [&](const std::vector<float>& v, int64_t c) {
    return TensorRef{const_cast<float*>(v.data()), DType::F32, T, c, c * sizeof(float)};
  };
  for (DType type : {DType::Q4_K, DType::Q8_0}) {
    const auto w = test::random_weights(type, rows, cols, 7);
    const TensorRef wr{const_cast<void*>(w.matrix.data), type, rows, cols, w.matrix.row_bytes};
    for (bool adds : {false, true}) {
      const TensorRef res = ref(residual, rows);
      std::vector<float> glu(T * cols), out(T * rows), glu_apart(T * cols), out_apart(T * rows);
      cpu.glu_matmul(ref(gate, cols), ref(up, cols), backend::GluActivation::Silu, ref(glu, cols), wr, nullptr,
                     adds ? &res : nullptr, ref(out, rows));
      cpu.glu(ref(gate, cols), ref(up, cols), backend::GluActivation::Silu, ref(glu_apart, cols));
      if (adds)
        cpu.matmul_add(ref(glu_apart, cols), wr, res, ref(out_apart, rows));
      else
        cpu.matmul(ref(glu_apart, cols), wr, nullptr, ref(out_apart, rows));
      EXPECT_EQ(std::memcmp(glu.data(), glu_apart.data(), glu.size() * sizeof(float)), 0) << dtype_name(type);
      EXPECT_EQ(std::memcmp(out.data(), out_apart.data(), out.size() * sizeof(float)), 0) << dtype_name(type);
    }
  }
}

}  // namespace
}  // namespace cellm::cpu
