// The single-session layout: a flat region that grows and keeps its history, and rings for
// windowed layers, checked against a brute-force model of what each query must see.
#include "kv/sequence_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "kv/faulty_storage.h"
#include "kv/host_storage.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

using testing::Thrown;
using testing::thrown_by;
using testing::windows_geometry;

// Tags written into a region's rows (first 8 bytes, layer 0's K), as the forward would.
uint64_t read_tag(const SequenceRegion& region, int64_t row) {
  uint64_t tag;
  std::memcpy(&tag, static_cast<const std::byte*>(region.storage->base()) + row * region.storage->bytes_per_row(),
              sizeof tag);
  return tag;
}

void write_tag(const SequenceRegion& region, int64_t row, uint64_t tag) {
  std::memcpy(static_cast<std::byte*>(region.storage->base()) + row * region.storage->bytes_per_row(), &tag,
              sizeof tag);
}

uint64_t tag_of(int64_t pos) { return 0x5eed0000 + static_cast<uint64_t>(pos); }

TEST(KvSequenceCache, OneRegionPerWindowRingsSizedForTheLongestStep) {
  SequenceCache c(windows_geometry({0, 4, 0, 8}), {.initial_rows = 16, .max_rows = 1024, .max_write = 8});
  ASSERT_EQ(c.region_count(), 3);
  EXPECT_EQ(c.region(0).window, 0);
  EXPECT_EQ(c.region(0).ring_rows, 0);
  EXPECT_EQ(c.region(0).layer_ids, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(c.region(0).storage->rows(), 16);
  EXPECT_EQ(c.region(1).ring_rows, 4 + 8 - 1);
  EXPECT_EQ(c.region(2).ring_rows, 8 + 8 - 1);
  EXPECT_EQ(c.region(2).storage->rows(), 15);
  EXPECT_EQ(c.region_of_layer(3), 2);
  // Layer 2 is the second layer of the full region: its K follows layer 0's K and V.
  const BoundTensor k2 = c.k_binding(2);
  EXPECT_EQ(k2.name, "kv.k.2");
  EXPECT_EQ(k2.data, static_cast<const std::byte*>(c.region(0).storage->base()) + 32);
  EXPECT_EQ(k2.row_stride, 64);
  EXPECT_EQ(k2.dims, (std::vector<int64_t>{16, 1, 4}));
  EXPECT_EQ(c.metrics().allocated_bytes, 16u * 64 + 11u * 32 + 15u * 32);
}

TEST(KvSequenceCache, FullRegionGrowsByDoublingKeepsHistoryAndStopsAtTheCap) {
  SequenceCache c(windows_geometry({0}), {.initial_rows = 16, .max_rows = 100, .max_write = 32});
  int32_t pos = 0;
  std::vector<int64_t> rows_seen;
  while (pos + 30 <= 100) {
    const SequenceStep& step = c.prepare(pos, 30);
    for (int32_t i = 0; i < 30; ++i) {
      EXPECT_EQ(step.regions[0].write_rows[static_cast<size_t>(i)], pos + i);
      write_tag(c.region(0), pos + i, tag_of(pos + i));
    }
    EXPECT_EQ(step.regions[0].read_rows, pos + 30);
    c.commit();
    pos += 30;
    rows_seen.push_back(c.metrics().rows);
    for (int32_t q = 0; q < pos; ++q)
      ASSERT_EQ(read_tag(c.region(0), q), tag_of(q)) << "after growth to " << c.metrics().rows;
  }
  EXPECT_EQ(rows_seen, (std::vector<int64_t>{32, 64, 100}));
  EXPECT_EQ(c.metrics().growth_count, 3);
  EXPECT_EQ(c.metrics().allocated_bytes, 100u * 32);
  const CacheMetrics before = c.metrics();
  EXPECT_EQ(thrown_by([&] { c.prepare(90, 11); }).code, ErrorCode::LimitExceeded);
  EXPECT_EQ(c.metrics(), before);
  EXPECT_FALSE(c.step_pending());
  c.prepare(90, 10);
  c.commit();
  EXPECT_EQ(c.length(), 100);
}

TEST(KvSequenceCache, FailedGrowthChangesNothingAndTheNextStepSucceeds) {
  FaultyStorage* faulty = nullptr;
  SequenceCache c(windows_geometry({0, 4}), {.initial_rows = 8, .max_rows = 64, .max_write = 8}, [&](size_t bytes) {
    auto s = std::make_unique<FaultyStorage>(std::make_unique<HostStorage>(bytes));
    if (faulty == nullptr) faulty = s.get();  // the full region's, made first
    return s;
  });
  c.prepare(0, 8);
  c.commit();
  const CacheMetrics before = c.metrics();
  const void* base = c.region(0).storage->base();
  faulty->fail_nth_growth(1);
  EXPECT_EQ(thrown_by([&] { c.prepare(8, 1); }).code, ErrorCode::OutOfMemory);
  EXPECT_EQ(c.metrics(), before);
  EXPECT_EQ(c.region(0).storage->base(), base);
  EXPECT_EQ(c.length(), 8);
  c.prepare(8, 1);
  c.commit();
  EXPECT_EQ(c.metrics().rows, 16);
}

TEST(KvSequenceCache, PositionsAndStepSizesAreChecked) {
  SequenceCache c(windows_geometry({0}), {.initial_rows = 8, .max_rows = 64, .max_write = 4});
  c.prepare(0, 3);
  EXPECT_THROW(c.prepare(3, 1), Error);  // still pending
  c.commit();
  const Thrown refused = thrown_by([&] { c.prepare(4, 1); });
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_EQ(refused.message, "kv sequence cache: step starts at position 4, expected 3 (the sequence's next position)");
  EXPECT_THROW(c.prepare(3, 5), Error);
  EXPECT_THROW(c.prepare(3, 0), Error);
  EXPECT_THROW(c.commit(), Error);
  EXPECT_THROW(c.rewind(4), Error);
  c.rewind(1);
  EXPECT_EQ(c.length(), 1);
}

TEST(KvSequenceCache, RewindStaysWithinTheRingsSlack) {
  SequenceCache ringed(windows_geometry({0, 4}), {.initial_rows = 64, .max_rows = 64, .max_write = 8});
  for (int32_t pos = 0; pos < 40; pos += 8) {
    ringed.prepare(pos, 8);
    ringed.commit();
  }
  // 9 behind the end: the ring of 11 rows kept only 8 of slack.
  EXPECT_EQ(thrown_by([&] { ringed.rewind(31); }).code, ErrorCode::LimitExceeded);
  ringed.rewind(32);
  EXPECT_EQ(ringed.length(), 32);

  SequenceCache flat(windows_geometry({0}), {.initial_rows = 64, .max_rows = 64, .max_write = 8});
  flat.prepare(0, 8);
  flat.commit();
  flat.rewind(0);  // no ring: anywhere
  EXPECT_EQ(flat.length(), 0);
}

// Random steps, aborts and rewinds; after each step, every query of the step must see exactly
// the positions of its window in every region (tags written by the "forward").
TEST(KvSequenceCache, RandomStepsMatchTheBruteForceModel) {
  const int32_t max_write = 6;
  SequenceCache c(windows_geometry({0, 1, 4, 9}), {.initial_rows = 4, .max_rows = 1 << 16, .max_write = max_write});
  std::mt19937 rng(11);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int32_t written_end = 0;
  int checked = 0;
  for (int round = 0; round < 3000; ++round) {
    if (pick(0, 9) == 0) {
      // Anywhere near the rings' slack: what the cache accepts must then read right.
      const int32_t pos = pick(std::min(c.length(), std::max(0, written_end - max_write - 3)), c.length());
      try {
        c.rewind(pos);
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), ErrorCode::LimitExceeded);
        ASSERT_LT(pos, written_end - max_write);
      }
    }
    const int32_t first = c.length();
    const int32_t n = pick(1, max_write);
    const SequenceStep& step = c.prepare(first, n);
    const int32_t last = first + n - 1;
    written_end = std::max(written_end, last + 1);
    for (int32_t r = 0; r < c.region_count(); ++r) {
      for (int32_t i = 0; i < n; ++i)
        write_tag(c.region(r), step.regions[static_cast<size_t>(r)].write_rows[static_cast<size_t>(i)],
                  tag_of(first + i));
    }
    for (int32_t r = 0; r < c.region_count(); ++r) {
      const SequenceRegion& region = c.region(r);
      for (int32_t p = first; p <= last; ++p) {
        std::vector<uint64_t> seen, expected;
        for (int64_t row = 0; row < step.regions[static_cast<size_t>(r)].read_rows; ++row) {
          if (sequence_row_visible(region, row, last, p)) seen.push_back(read_tag(region, row));
        }
        std::sort(seen.begin(), seen.end());
        for (int32_t q = region.window == 0 ? 0 : std::max(0, p - region.window + 1); q <= p; ++q)
          expected.push_back(tag_of(q));
        ASSERT_EQ(seen, expected) << "round " << round << ", window " << region.window << ", query " << p;
        ++checked;
      }
    }
    if (pick(0, 4) == 0) {
      c.abort();
    } else {
      c.commit();
    }
  }
  EXPECT_GT(checked, 20000);
  EXPECT_GT(c.metrics().growth_count, 3);
}

}  // namespace
}  // namespace cellm::kv
