#pragma once
// The check shared by the batched libm tests: a batched function gives the scalar one's bits on
// every input (any NaN for a NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "core/half.h"

namespace cellm::testing {

template <class Batched, class Scalar>
void expect_same_bits(Batched batched, Scalar scalar, const char* name, const std::vector<float>& x) {
  std::vector<float> got = x;
  batched(got.data(), got.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = scalar(x[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[i])) << name << "(" << x[i] << ")";
      continue;
    }
    ASSERT_EQ(float_to_bits(got[i]), float_to_bits(want))
        << name << "(" << x[i] << " = 0x" << std::hex << float_to_bits(x[i]) << ")";
  }
}

}  // namespace cellm::testing
