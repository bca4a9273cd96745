// The matmul entry points: bias, argument checks, ISA selection, scratch reuse.
#include <gtest/gtest.h>

#include <functional>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

ErrorCode error_code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no error thrown";
  return ErrorCode::Internal;
}

TEST(MatmulApi, BiasIsAddedToEveryTokensOutputs) {
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (DType type : {DType::Q4_1, DType::Q6_K, DType::F16}) {
    const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 64;
    const auto w = test::random_weights(type, 9, cols, 1);
    const auto x = test::random_activations(5, cols, cols, 2);
    std::vector<float> bias(9);
    for (int n = 0; n < 9; ++n) bias[n] = 0.25f * static_cast<float>(n) - 1.0f;
    std::vector<float> plain(5 * 9), biased(5 * 9);
    matmul(pool, w.matrix, x.data(), cols, 5, plain.data(), 9, nullptr, scratch);
    matmul(pool, w.matrix, x.data(), cols, 5, biased.data(), 9, bias.data(), scratch);
    for (int t = 0; t < 5; ++t)
      for (int n = 0; n < 9; ++n) EXPECT_EQ(biased[t * 9 + n], plain[t * 9 + n] + bias[n]) << dtype_name(type);
  }
}

TEST(MatmulApi, RejectsColumnsThatAreNotWholeBlocks) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<uint8_t> bytes(4096);
  std::vector<float> x(256), out(4);
  WeightMatrix q4{DType::Q4_0, bytes.data(), 4, 48, 27};
  EXPECT_EQ(error_code_of([&] { matmul(pool, q4, x.data(), 48, 1, out.data(), 4, nullptr, scratch); }),
            ErrorCode::InvalidArgument);
  WeightMatrix q4k{DType::Q4_K, bytes.data(), 4, 128, 72};
  EXPECT_EQ(error_code_of([&] { matmul(pool, q4k, x.data(), 128, 1, out.data(), 4, nullptr, scratch); }),
            ErrorCode::InvalidArgument);
  try {
    matmul(pool, q4, x.data(), 48, 1, out.data(), 4, nullptr, scratch);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("48"), std::string::npos) << e.what();
  }
}

TEST(MatmulApi, RejectsShortRowsStridesAndUnsupportedTypes) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<uint8_t> bytes(4096);
  std::vector<float> x(256), out(8);
  WeightMatrix short_rows{DType::Q8_0, bytes.data(), 2, 64, 60};
  EXPECT_EQ(error_code_of([&] { matmul(pool, short_rows, x.data(), 64, 1, out.data(), 2, nullptr, scratch); }),
            ErrorCode::InvalidArgument);
  WeightMatrix ok{DType::Q8_0, bytes.data(), 2, 64, 68};
  EXPECT_EQ(error_code_of([&] { matmul(pool, ok, x.data(), 32, 1, out.data(), 2, nullptr, scratch); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code_of([&] { matmul(pool, ok, x.data(), 64, 1, out.data(), 1, nullptr, scratch); }),
            ErrorCode::InvalidArgument);
  WeightMatrix q2k{DType::Q2_K, bytes.data(), 2, 256, 84};
  EXPECT_EQ(error_code_of([&] { matmul(pool, q2k, x.data(), 256, 1, out.data(), 2, nullptr, scratch); }),
            ErrorCode::Unsupported);
  EXPECT_FALSE(matmul_supports(DType::Q2_K));
  EXPECT_TRUE(matmul_supports(DType::Q6_K));
}

TEST(MatmulApi, DefaultPathIsAnAvailableOne) {
  EXPECT_TRUE(matmul_isa_available(default_matmul_isa()));
  EXPECT_TRUE(matmul_isa_available(MatmulIsa::Portable));
  EXPECT_EQ(matmul_isa_name(MatmulIsa::Avx512), "avx512");
}

TEST(MatmulApi, OneScratchServesCallsOfDifferentSizes) {
  ThreadPool pool(2);
  MatmulScratch shared;
  const auto small = test::random_weights(DType::Q4_K, 8, 256, 3);
  const auto large = test::random_weights(DType::Q5_0, 40, 2048, 4);
  const auto x = test::random_activations(16, 2048, 2048, 5);
  for (const auto* w : {&small.matrix, &large.matrix, &small.matrix}) {
    std::vector<float> with_shared(16 * w->rows), with_fresh(16 * w->rows);
    MatmulScratch fresh;
    matmul(pool, *w, x.data(), 2048, 16, with_shared.data(), w->rows, nullptr, shared);
    matmul(pool, *w, x.data(), 2048, 16, with_fresh.data(), w->rows, nullptr, fresh);
    EXPECT_EQ(with_shared, with_fresh);
  }
}

}  // namespace
}  // namespace cellm::cpu
