#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/expect_error.h"
#include "core/error.h"
#include "runtime/step_inputs.h"

namespace cellm::runtime {
namespace {

using backend::TensorRef;

// Host memory as "device" memory; counts the copies and waits StepInputs asks for. Kernels are
// not its business.
class RecordingBackend final : public backend::Backend {
 public:
  struct Copy {
    size_t offset, bytes;  // from the start of the step inputs' device buffer
  };
  std::vector<Copy> copies;
  int waits = 0;
  char* device_base = nullptr;

  std::string name() const override { return "recording"; }
  std::string description() const override { return "recording"; }
  void* allocate(size_t bytes, const char*) override {
    device_base = static_cast<char*>(std::malloc(bytes));
    std::memset(device_base, 0x5a, bytes);  // what the device held before: never the inputs
    return device_base;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    copies.push_back({static_cast<size_t>(static_cast<char*>(dst) - device_base), bytes});
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override { ++waits; }
  TensorRef place_weight(const TensorRef&, const std::string&) override { return unused<TensorRef>(); }
  TensorRef place_stacked_weight(std::span<const TensorRef>, const std::string&) override {
    return unused<TensorRef>();
  }
  std::unique_ptr<kv::KvStorage> create_kv_storage(size_t) override { return unused<std::unique_ptr<kv::KvStorage>>(); }
  backend::MemoryStats memory_stats() const override { return {}; }
  void embed(const TensorRef&, const int32_t*, float, const TensorRef&) override { unused<int>(); }
  void rms_norm(const TensorRef&, const float*, int32_t, float, const TensorRef&) override { unused<int>(); }
  void matmul(const TensorRef&, const TensorRef&, const float*, const TensorRef&) override { unused<int>(); }
  void rope(const TensorRef&, const int32_t*, const backend::RopeParams&) override { unused<int>(); }
  void kv_store(const TensorRef&, const TensorRef&, const backend::KvDestination&) override { unused<int>(); }
  void attention(const TensorRef&, const backend::PagedKv&, const int32_t*, float, const TensorRef&) override {
    unused<int>();
  }
  void add(const TensorRef&, const TensorRef&, const TensorRef&) override { unused<int>(); }
  void glu(const TensorRef&, const TensorRef&, backend::GluActivation, const TensorRef&) override { unused<int>(); }
  void gather_rows(const TensorRef&, const int32_t*, const TensorRef&) override { unused<int>(); }
  void argmax_rows(const TensorRef&, int32_t*) override { unused<int>(); }

 private:
  template <class T>
  static T unused() {
    fail(ErrorCode::Unsupported, "not a kernel backend");
  }
};

const int32_t* ints(const void* p) { return static_cast<const int32_t*>(p); }

TEST(StepInputs, RegionsKeepTheirAddressesAndTheirAlignment) {
  RecordingBackend backend;
  const std::vector<size_t> capacities{40, 4, 1000, 300};
  StepInputs inputs(backend, capacities);
  // Offsets from the buffer's start (a device allocation starts aligned; this one is malloc's).
  auto offset = [&](size_t r) { return static_cast<size_t>(static_cast<char*>(inputs.device(r)) - backend.device_base); };
  EXPECT_EQ(offset(0), 0u);
  for (size_t r = 0; r < capacities.size(); ++r) {
    EXPECT_EQ(offset(r) % StepInputs::kAlignment, 0u) << r;
    EXPECT_EQ(inputs.capacity(r), capacities[r]);
    if (r > 0) {
      EXPECT_GE(offset(r), offset(r - 1) + capacities[r - 1]) << r;
    }
  }
  void* before = inputs.device(2);
  const std::vector<int32_t> v{1, 2, 3};
  inputs.put(2, v);
  inputs.upload();
  EXPECT_EQ(inputs.device(2), before);
}

TEST(StepInputs, RegionsInUseNearEachOtherTravelInOneCopy) {
  RecordingBackend backend;
  // Four small regions, then one far beyond the merge gap (a large, mostly unused page list
  // ahead of it), then a last small one.
  const size_t far = 4 * StepInputs::kMergeGapBytes;
  StepInputs inputs(backend, std::vector<size_t>{64, 64, 64, 4, far, 64});
  const std::vector<int32_t> tokens{7, 8}, positions{30, 31}, cells{5}, read_len{16}, tail{9, 9, 9};
  inputs.put(0, tokens);
  inputs.put(1, positions);
  inputs.put(3, read_len);  // region 2 unused this step
  inputs.put(4, cells);
  ASSERT_EQ(inputs.upload(), 1);
  ASSERT_EQ(backend.copies.size(), 1u);
  // From region 0's start to the end of region 4's one value: nothing past what was put.
  const size_t end = static_cast<size_t>(static_cast<char*>(inputs.device(4)) - backend.device_base) + 4;
  EXPECT_EQ(backend.copies[0].offset, 0u);
  EXPECT_EQ(backend.copies[0].bytes, end);
  EXPECT_EQ(ints(inputs.device(0))[1], 8);
  EXPECT_EQ(ints(inputs.device(1))[0], 30);
  EXPECT_EQ(ints(inputs.device(3))[0], 16);
  EXPECT_EQ(ints(inputs.device(4))[0], 5);
  EXPECT_EQ(ints(inputs.device(4))[1], 0x5a5a5a5a) << "copied past what was put";

  // The last region lies past region 4's unused capacity: a copy of its own.
  backend.copies.clear();
  inputs.settled();
  inputs.put(0, tokens);
  inputs.put(5, tail);
  ASSERT_EQ(inputs.upload(), 2);
  EXPECT_EQ(backend.copies[0].offset, 0u);
  EXPECT_EQ(backend.copies[0].bytes, 8u);
  EXPECT_EQ(backend.copies[1].offset, static_cast<size_t>(static_cast<char*>(inputs.device(5)) - backend.device_base));
  EXPECT_EQ(backend.copies[1].bytes, 12u);
  EXPECT_EQ(ints(inputs.device(5))[2], 9);

  // Nothing put since: nothing to send.
  backend.copies.clear();
  EXPECT_EQ(inputs.upload(), 0);
  EXPECT_TRUE(backend.copies.empty());
}

TEST(StepInputs, APutWaitsForAnUploadNoOneWaitedFor) {
  RecordingBackend backend;
  StepInputs inputs(backend, std::vector<size_t>{64});
  const std::vector<int32_t> v{1};
  inputs.put(0, v);
  EXPECT_EQ(backend.waits, 0);
  inputs.upload();
  inputs.settled();  // the step's output was read: the stream has passed the copy
  inputs.put(0, v);
  EXPECT_EQ(backend.waits, 0);
  inputs.upload();  // a step that then failed before anyone waited
  inputs.put(0, v);
  EXPECT_EQ(backend.waits, 1) << "the mirror was rewritten while its copy may still read it";
  inputs.put(0, v);
  EXPECT_EQ(backend.waits, 1);
}

TEST(StepInputs, MoreValuesThanARegionHoldsAreRefused) {
  RecordingBackend backend;
  StepInputs inputs(backend, std::vector<size_t>{8, 8});
  const std::vector<int32_t> three{1, 2, 3};
  expect_error(ErrorCode::Internal, "region 1 holds 8 bytes, not 12", [&] { inputs.put(1, three); });
}

}  // namespace
}  // namespace cellm::runtime
