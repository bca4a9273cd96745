// Device KV storage in both growth modes: data survives growth, the epoch and base follow the
// mode's contract, failed growths (at every phase, and for impossible sizes) change nothing,
// row copies happen on the device, and a CellCache runs on top of it.
#include <gtest/gtest.h>

#include <functional>

#include "cuda_test_support.h"
#include "kv/cell_cache.h"

namespace cellm::cuda::testing {
namespace {

std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

std::vector<uint8_t> read_rows(CudaBackend& gpu, const kv::KvStorage& s, int64_t rows) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * s.bytes_per_row());
  gpu.download(out.data(), s.base(), out.size());
  return out;
}

void expect_out_of_memory(const std::function<void()>& f, const std::string& what, const std::string& named = "") {
  try {
    f();
    ADD_FAILURE() << what << " was granted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::OutOfMemory) << e.what();
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
  }
}

class CudaKvStorage : public ::testing::TestWithParam<KvGrowth> {
 protected:
  std::unique_ptr<DeviceKvStorage> make(CudaBackend& gpu, size_t bytes_per_row) {
    return gpu.create_kv_storage(bytes_per_row, GetParam());
  }
};

#define CELLM_REQUIRE_GROWTH_MODE(gpu)                                                       \
  if (GetParam() == KvGrowth::Vmm && !(gpu).vmm_supported())                                 \
  GTEST_SKIP() << "this GPU has no virtual memory management"

TEST_P(CudaKvStorage, GrowthKeepsRowsAndFollowsTheEpochContract) {
  CELLM_REQUIRE_GPU(gpu);
  CELLM_REQUIRE_GROWTH_MODE(gpu);
  const size_t bpr = 1000;  // not a divisor of the 2 MiB granule
  auto s = make(gpu, bpr);
  EXPECT_EQ(s->base(), nullptr);
  EXPECT_EQ(s->rows(), 0);
  const size_t before = gpu.memory_stats().allocated;
  s->grow(10);
  EXPECT_EQ(s->rows(), 10);
  EXPECT_NE(s->base(), nullptr);
  EXPECT_EQ(s->binding_epoch(), 1u);  // null -> base is a move in both modes
  EXPECT_GE(gpu.memory_stats().allocated, before + 10 * bpr);
  const auto data = pattern(10 * bpr, 7);
  gpu.upload(s->base(), data.data(), data.size());
  void* base = s->base();
  for (int64_t rows : {11, 3000, 9000}) {  // 9000 rows cross several granules
    s->grow(rows);
    EXPECT_EQ(s->rows(), rows);
    if (GetParam() == KvGrowth::Vmm) {
      EXPECT_EQ(s->base(), base);
      EXPECT_EQ(s->binding_epoch(), 1u);
      EXPECT_FALSE(s->last_growth_moved());
    } else {
      EXPECT_TRUE(s->last_growth_moved());
      base = s->base();
    }
    EXPECT_EQ(read_rows(gpu, *s, 10), data) << rows;
  }
  if (GetParam() == KvGrowth::Copy) {
    EXPECT_EQ(s->binding_epoch(), 4u);
  }
  // The new rows are usable memory: write and read the last one.
  const auto last = pattern(bpr, 99);
  gpu.upload(static_cast<char*>(s->base()) + 8999 * bpr, last.data(), bpr);
  std::vector<uint8_t> back(bpr);
  gpu.download(back.data(), static_cast<char*>(s->base()) + 8999 * bpr, bpr);
  EXPECT_EQ(back, last);
  EXPECT_THROW(s->grow(9000), Error);  // not a growth
}

TEST_P(CudaKvStorage, FailedGrowthChangesNothing) {
  CELLM_REQUIRE_GPU(gpu);
  CELLM_REQUIRE_GROWTH_MODE(gpu);
  const size_t bpr = 4096;
  auto s = make(gpu, bpr);
  s->grow(100);
  const auto data = pattern(100 * bpr, 3);
  gpu.upload(s->base(), data.data(), data.size());
  void* base = s->base();
  const uint64_t epoch = s->binding_epoch();
  auto unchanged = [&](const char* what) {
    EXPECT_EQ(s->rows(), 100) << what;
    EXPECT_EQ(s->base(), base) << what;
    EXPECT_EQ(s->binding_epoch(), epoch) << what;
    EXPECT_EQ(read_rows(gpu, *s, 100), data) << what;
  };
  // Far more than the device has (a petabyte): refused as out of memory.
  expect_out_of_memory([&] { s->grow(int64_t{1} << 38); }, "a petabyte pool");
  unchanged("impossible size");
  for (kv::GrowthPhase phase : {kv::GrowthPhase::BeforeAllocate, kv::GrowthPhase::AfterAllocate,
                                kv::GrowthPhase::AfterCopy}) {
    s->set_growth_hook([phase](kv::GrowthPhase at) {
      if (at == phase) fail(ErrorCode::OutOfMemory, "injected");
    });
    EXPECT_THROW(s->grow(5000), Error);
    unchanged("injected failure");
  }
  s->set_growth_hook({});
  s->grow(5000);
  EXPECT_EQ(read_rows(gpu, *s, 100), data);
}

TEST_P(CudaKvStorage, CopyRowsCopiesWholeRowsOnTheDevice) {
  CELLM_REQUIRE_GPU(gpu);
  CELLM_REQUIRE_GROWTH_MODE(gpu);
  const size_t bpr = 96;
  auto s = make(gpu, bpr);
  s->grow(8);
  auto host = pattern(8 * bpr, 1);
  gpu.upload(s->base(), host.data(), host.size());
  const kv::RowCopy copies[] = {{1, 6}, {0, 7}};
  s->copy_rows(copies);
  std::copy_n(host.begin() + 1 * bpr, bpr, host.begin() + 6 * bpr);
  std::copy_n(host.begin() + 0 * bpr, bpr, host.begin() + 7 * bpr);
  EXPECT_EQ(read_rows(gpu, *s, 8), host);
  const kv::RowCopy outside[] = {{0, 8}};
  EXPECT_THROW(s->copy_rows(outside), Error);
}

TEST_P(CudaKvStorage, CellCacheGrowsOnIt) {
  CELLM_REQUIRE_GPU(gpu);
  CELLM_REQUIRE_GROWTH_MODE(gpu);
  kv::Geometry geometry({{2, 64, 0, DType::F16}, {2, 64, 8, DType::F16}});
  kv::CellCacheConfig config;
  config.initial_rows = 32;
  kv::CellCache cache(geometry, config, make(gpu, geometry.bytes_per_cell()));
  const kv::SeqId seq = cache.create();
  const std::vector<uint8_t> first = pattern(geometry.bytes_per_cell(), 5);
  for (int32_t pos = 0; pos < 200; pos += 50) {
    std::vector<int32_t> positions(50);
    for (int32_t i = 0; i < 50; ++i) positions[static_cast<size_t>(i)] = pos + i;
    const kv::StepBuffers& step = cache.prepare(std::vector<kv::SeqId>(50, seq), positions);
    if (pos == 0) gpu.upload(static_cast<char*>(cache.storage().base()) + step.cells[0] * geometry.bytes_per_cell(),
                             first.data(), first.size());
    cache.commit();
  }
  EXPECT_GE(cache.storage().rows(), 200);
  EXPECT_GT(cache.metrics().growth_count, 0);
  const int64_t cell0 = cache.pages_of(seq)[0] * config.page_cells;
  std::vector<uint8_t> back(first.size());
  gpu.download(back.data(), static_cast<char*>(cache.storage().base()) + cell0 * geometry.bytes_per_cell(), back.size());
  EXPECT_EQ(back, first);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaKvStorage, ::testing::Values(KvGrowth::Copy, KvGrowth::Vmm),
                         [](const auto& p) { return std::string(kv_growth_name(p.param)); });

TEST(CudaBackendBasics, DescribesItselfAndAccountsMemory) {
  CELLM_REQUIRE_GPU(gpu);
  EXPECT_NE(gpu.description().find("cuda"), std::string::npos);
  const backend::MemoryStats before = gpu.memory_stats();
  EXPECT_GT(before.device_total, 0u);
  void* p = gpu.allocate(size_t{64} << 20, "test");
  const backend::MemoryStats during = gpu.memory_stats();
  EXPECT_EQ(during.allocated, before.allocated + (size_t{64} << 20));
  EXPECT_GE(during.peak_allocated, during.allocated);
  gpu.release(p);
  EXPECT_EQ(gpu.memory_stats().allocated, before.allocated);
  expect_out_of_memory([&] { gpu.allocate(size_t{1} << 50, "a petabyte"); }, "a petabyte buffer", "a petabyte");
  EXPECT_EQ(gpu.memory_stats().allocated, before.allocated);
}

}  // namespace
}  // namespace cellm::cuda::testing
