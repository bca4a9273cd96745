// Growth of the cell cache's pool, its limit, and fault injection: a growth that fails -
// refused by the storage or part-way through its copy - leaves bindings, rows and tables as
// they were, and the next step succeeds.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/cell_cache.h"
#include "kv/pool_bindings.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

using testing::append;
using testing::capture;
using testing::make_cache;
using testing::Thrown;
using testing::thrown_by;
using testing::windows_geometry;

std::vector<const void*> binding_addresses(const CellCache& cache) {
  std::vector<const void*> out;
  for (const BoundTensor& b : pool_bindings(cache.geometry(), cache.storage())) out.push_back(b.data);
  return out;
}

TEST(KvCellCacheGrowth, GrowsGeometricallyAndKeepsHistory) {
  auto t = make_cache(windows_geometry({0, 4}), {.page_cells = 16, .initial_rows = 512});
  const SeqId a = t->create();
  std::vector<int32_t> cells = append(*t, a, 256);
  const auto more = append(*t, a, 256);
  cells.insert(cells.end(), more.begin(), more.end());
  for (size_t pos = 0; pos < cells.size(); ++pos) t.write_tag(cells[pos], 7000 + pos);
  EXPECT_EQ(t->metrics().rows, 512);
  EXPECT_EQ(t->metrics().growth_count, 0);
  const uint64_t epoch = t->metrics().binding_epoch;

  append(*t, a, 1);
  CacheMetrics m = t->metrics();
  EXPECT_EQ(m.rows, 1024);
  EXPECT_EQ(m.growth_count, 1);
  EXPECT_EQ(m.allocated_bytes, 1024u * t->geometry().bytes_per_cell());
  EXPECT_NE(m.binding_epoch, epoch);  // host growth copies: bindings must be rebuilt
  EXPECT_TRUE(t->storage().last_growth_moved());
  for (size_t pos = 0; pos < cells.size(); ++pos) ASSERT_EQ(t.tag(cells[pos]), 7000 + pos) << pos;

  // Never above twice the rows in use after a growth.
  for (int round = 0; round < 12; ++round) {
    const SeqId s = t->create();
    append(*t, s, 400);
    const CacheMetrics after = t->metrics();
    EXPECT_EQ(after.allocated_bytes, static_cast<size_t>(after.rows) * after.bytes_per_cell);
    EXPECT_LT(after.rows, 2 * after.pages_in_use * 16);
  }
}

TEST(KvCellCacheGrowth, StepPastTheLimitIsRefusedAndChangesNothing) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 16, .initial_rows = 256, .max_rows = 1024});
  const SeqId a = t->create();
  const SeqId b = t->create();
  append(*t, a, 500);  // 32 pages, 12 cells of the last one free
  append(*t, b, 512);  // 32 more: the pool is at its limit of 64 pages
  EXPECT_EQ(t->metrics().rows, 1024);
  const Demand one_page_more[] = {{a, 13}};
  EXPECT_FALSE(t->can_fit(one_page_more));
  const auto full = capture(*t, 2);
  const Thrown refused = thrown_by([&] { append(*t, a, 13); });
  EXPECT_EQ(refused.code, ErrorCode::LimitExceeded);
  EXPECT_EQ(refused.message, "kv prepare: needs 1040 rows, the configured limit is 1024 rows");
  EXPECT_EQ(capture(*t, 2), full);
  const Demand fits[] = {{a, 12}};
  EXPECT_TRUE(t->can_fit(fits));
  append(*t, a, 12);  // the free cells of a's last page still serve
  EXPECT_EQ(t->length(a), 512);
}

TEST(KvCellCacheGrowth, RefusedAllocationLeavesBindingsRowsAndTables) {
  auto t = make_cache(windows_geometry({0, 4, 512}), {.page_cells = 16, .initial_rows = 64});
  const SeqId a = t->create();
  const auto cells = append(*t, a, 60);
  for (size_t pos = 0; pos < cells.size(); ++pos) t.write_tag(cells[pos], pos);
  const auto before = capture(*t, 1);
  const auto bindings = binding_addresses(*t);

  t.faulty->fail_nth_growth(1);
  const SeqId ids[] = {a, a, a, a, a};
  const int32_t pos[] = {60, 61, 62, 63, 64};
  EXPECT_EQ(thrown_by([&] { t->prepare(ids, pos); }).code, ErrorCode::OutOfMemory);
  EXPECT_FALSE(t->step_pending());
  EXPECT_EQ(capture(*t, 1), before);
  EXPECT_EQ(binding_addresses(*t), bindings);

  // The next step succeeds, growing this time.
  t->prepare(ids, pos);
  t->commit();
  EXPECT_EQ(t->length(a), 65);
  EXPECT_EQ(t->metrics().rows, 128);
  for (size_t p = 0; p < cells.size(); ++p) ASSERT_EQ(t.tag(cells[p]), p);
}

TEST(KvCellCacheGrowth, GrowthFailingPartWayLeavesEverything) {
  for (GrowthPhase phase : {GrowthPhase::AfterAllocate, GrowthPhase::AfterCopy}) {
    auto t = make_cache(windows_geometry({0}), {.page_cells = 8, .initial_rows = 16});
    const SeqId a = t->create();
    const auto cells = append(*t, a, 16);
    for (size_t pos = 0; pos < cells.size(); ++pos) t.write_tag(cells[pos], 50 + pos);
    const auto before = capture(*t, 1);
    const auto bindings = binding_addresses(*t);
    t.host->set_growth_hook([phase](GrowthPhase at) {
      if (at == phase) fail(ErrorCode::OutOfMemory, "device lost mid-growth");
    });
    const Thrown failed = thrown_by([&] { append(*t, a, 1); });
    EXPECT_EQ(failed.code, ErrorCode::OutOfMemory);
    EXPECT_EQ(failed.message, "device lost mid-growth");
    EXPECT_EQ(capture(*t, 1), before);
    EXPECT_EQ(binding_addresses(*t), bindings);
    t.host->set_growth_hook({});
    append(*t, a, 1);
    EXPECT_EQ(t->metrics().rows, 32);
    for (size_t p = 0; p < cells.size(); ++p) ASSERT_EQ(t.tag(cells[p]), 50 + p);
  }
}

TEST(KvCellCacheGrowth, CloneAndRewindThatCannotGrowChangeNothing) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4, .initial_rows = 8});
  const SeqId a = t->create();
  append(*t, a, 8);  // the pool is full
  const SeqId whole = t->clone(a, 8);
  const auto before = capture(*t, 2);
  t.faulty->fail_every_growth(true);
  EXPECT_THROW(t->clone(a, 6), Error);
  EXPECT_EQ(capture(*t, 2), before);
  EXPECT_THROW(t->rewind(whole, 5), Error);  // into a shared page: needs a private copy
  EXPECT_EQ(capture(*t, 2), before);
  t->rewind(whole, 4);  // a page boundary needs nothing
  t.faulty->fail_every_growth(false);
  const SeqId part = t->clone(a, 6);
  EXPECT_EQ(t->length(part), 6);
  EXPECT_EQ(t->metrics().growth_count, 1);
}

}  // namespace
}  // namespace cellm::kv
