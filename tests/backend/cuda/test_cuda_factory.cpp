// Backend selection: "cuda" and "auto" give the CUDA backend where a GPU is usable; without
// one, "cuda" is refused with the reason and "auto" falls back to the CPU (this part runs on
// machines without a GPU too).
#include <gtest/gtest.h>

#include "backend/factory.h"
#include "common/expect_error.h"
#include "cuda_test_support.h"

namespace cellm::cuda::testing {
namespace {

backend::BackendOptions options(const std::string& name) {
  backend::BackendOptions o;
  o.name = name;
  o.threads = 1;
  return o;
}

TEST(CudaFactory, PicksTheGpuWhenThereIsOne) {
  CELLM_REQUIRE_GPU(gpu);
  (void)gpu;
  EXPECT_EQ(backend::create_backend(options("cuda"))->name(), "cuda");
  EXPECT_EQ(backend::create_backend(options("auto"))->name(), "cuda");
  EXPECT_EQ(backend::create_backend(options("cpu"))->name(), "cpu");
}

TEST(CudaFactory, WithoutAGpuCudaIsRefusedAndAutoUsesTheCpu) {
  const DeviceInfo info = query_device(0);
  if (info.available) GTEST_SKIP() << "a GPU is present";
  expect_error(ErrorCode::Unsupported, info.reason, [] { backend::create_backend(options("cuda")); });
  EXPECT_EQ(backend::create_backend(options("auto"))->name(), "cpu");
}

}  // namespace
}  // namespace cellm::cuda::testing
