// Backend::glu_matmul (the executor's call for a Glu followed by a MatMul or MatMulAdd of its
// output) is, bit for bit, glu into `glu_out` and then matmul (or matmul_add) of `glu_out`:
// backends that fuse it (CUDA quantizes the product's activations in the GLU's kernel) must give
// these bits, and the CPU computes exactly this.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "fused_call_test_support.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

using backend::TensorRef;

TEST(GluMatmul, IsTheActivationThenTheProductOfItsOutput) {
  CpuBackend cpu(2);
  const int64_t cols = 512, rows = 24, T = 3;
  const auto gate = test::random_activations(T, cols, cols, 4), up = test::random_activations(T, cols, cols, 5);
  const auto residual = test::random_activations(T, rows, rows, 6);
  const TensorRef g{const_cast<float*>(gate.data()), DType::F32, T, cols, cols * sizeof(float)};
  const TensorRef u{const_cast<float*>(up.data()), DType::F32, T, cols, cols * sizeof(float)};
  for (DType type : {DType::Q4_K, DType::Q8_0}) {
    const auto w = test::random_weights(type, rows, cols, 7);
    const TensorRef wr{const_cast<void*>(w.matrix.data), type, rows, cols, w.matrix.row_bytes};
    test::expect_fused_is_apart(
        cpu, T, cols, wr, residual,
        [&](const TensorRef& glu, const TensorRef* res, const TensorRef& out) {
          cpu.glu_matmul(g, u, backend::GluActivation::Silu, glu, wr, nullptr, res, out);
        },
        [&](const TensorRef& glu) { cpu.glu(g, u, backend::GluActivation::Silu, glu); },
        std::string(dtype_name(type)));
  }
}

}  // namespace
}  // namespace cellm::cpu
