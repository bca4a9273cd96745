#pragma once
// The check shared by the tests of the Backend's fused producer + product calls (glu_matmul,
// attention_matmul): the fused call gives, bit for bit, the producer's rows and then matmul (or
// matmul_add of the residual) of them, the calls made apart.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace cellm::test {

// T rows of mid_cols floats from the producer, multiplied by w (rows x mid_cols); with and
// without the residual (T x w.rows). fused(mid, residual or null, out) makes the fused call,
// producer(mid) the producer's call alone.
template <class Fused, class Producer>
void expect_fused_is_apart(backend::Backend& backend, int64_t T, int64_t mid_cols, const backend::TensorRef& w,
                           const std::vector<float>& residual, Fused fused, Producer producer,
                           const std::string& what) {
  const int64_t rows = w.rows;
  auto ref = [&](const std::vector<float>& v, int64_t width) {
    return backend::TensorRef{const_cast<float*>(v.data()), DType::F32, T, width, width * sizeof(float)};
  };
  const backend::TensorRef res = ref(residual, rows);
  for (bool adds : {false, true}) {
    std::vector<float> mid(T * mid_cols), out(T * rows), mid_apart(T * mid_cols), out_apart(T * rows);
    fused(ref(mid, mid_cols), adds ? &res : nullptr, ref(out, rows));
    producer(ref(mid_apart, mid_cols));
    if (adds)
      backend.matmul_add(ref(mid_apart, mid_cols), w, res, ref(out_apart, rows));
    else
      backend.matmul(ref(mid_apart, mid_cols), w, nullptr, ref(out_apart, rows));
    const std::string how = what + (adds ? " +residual" : "");
    EXPECT_EQ(std::memcmp(mid.data(), mid_apart.data(), mid.size() * sizeof(float)), 0) << how << ": producer rows";
    EXPECT_EQ(std::memcmp(out.data(), out_apart.data(), out.size() * sizeof(float)), 0) << how << ": product";
  }
}

}  // namespace cellm::test
