#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "kv/faulty_storage.h"
#include "kv/growth.h"
#include "kv/host_storage.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

void fill_rows(HostStorage& s, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) std::memset(s.row(r), static_cast<int>(r & 0x7f), s.bytes_per_row());
}

bool rows_hold_fill(const HostStorage& s, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t b = 0; b < s.bytes_per_row(); ++b) {
      if (s.row(r)[b] != static_cast<std::byte>(r & 0x7f)) return false;
    }
  }
  return true;
}

TEST(KvHostStorage, GrowthKeepsRowsMovesBaseAndBumpsEpoch) {
  HostStorage s(24);
  EXPECT_EQ(s.rows(), 0);
  EXPECT_EQ(s.base(), nullptr);
  s.grow(5);
  EXPECT_EQ(s.binding_epoch(), 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.base()) % HostStorage::kAlignment, 0u);
  fill_rows(s, 5);
  s.grow(40);
  EXPECT_EQ(s.rows(), 40);
  EXPECT_EQ(s.allocated_bytes(), 40u * 24);
  EXPECT_EQ(s.binding_epoch(), 2u);
  EXPECT_TRUE(s.last_growth_moved());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.base()) % HostStorage::kAlignment, 0u);
  EXPECT_TRUE(rows_hold_fill(s, 5));
  EXPECT_THROW(s.grow(40), Error);
}

TEST(KvHostStorage, LargePoolsStartOnHugePageBoundariesAndKeepTheirRowsAcrossGrowth) {
  // Across the 2 MiB line (small -> huge alignment -> larger), rows survive and each block is
  // released with the alignment it was allocated with (the ASan build checks the pairing).
  constexpr size_t kHuge = size_t{2} << 20;
  HostStorage s(23040);  // a SmolLM2 cell row
  s.grow(16);            // 360 KiB
  fill_rows(s, 16);
  s.grow(200);           // 4.4 MiB
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.base()) % kHuge, 0u);
  EXPECT_TRUE(rows_hold_fill(s, 16));
  fill_rows(s, 200);
  s.grow(400);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.base()) % kHuge, 0u);
  EXPECT_TRUE(rows_hold_fill(s, 200));
}

TEST(KvHostStorage, CopyRowsCopiesWholeRows) {
  HostStorage s(16);
  s.grow(4);
  fill_rows(s, 4);
  const RowCopy copies[] = {{1, 3}, {0, 2}};
  s.copy_rows(copies);
  EXPECT_EQ(std::memcmp(s.row(3), s.row(1), 16), 0);
  EXPECT_EQ(std::memcmp(s.row(2), s.row(0), 16), 0);
  const RowCopy outside[] = {{0, 4}};
  EXPECT_THROW(s.copy_rows(outside), Error);
}

TEST(KvHostStorage, GrowthFailingAtAnyPhaseChangesNothing) {
  for (GrowthPhase phase : {GrowthPhase::BeforeAllocate, GrowthPhase::AfterAllocate, GrowthPhase::AfterCopy}) {
    HostStorage s(8);
    s.grow(3);
    fill_rows(s, 3);
    void* base = s.base();
    s.set_growth_hook([phase](GrowthPhase at) {
      if (at == phase) fail(ErrorCode::OutOfMemory, "injected");
    });
    EXPECT_THROW(s.grow(100), Error);
    EXPECT_EQ(s.rows(), 3);
    EXPECT_EQ(s.base(), base);
    EXPECT_EQ(s.binding_epoch(), 1u);
    EXPECT_TRUE(rows_hold_fill(s, 3));
    s.set_growth_hook({});
    s.grow(100);
    EXPECT_TRUE(rows_hold_fill(s, 3));
  }
}

TEST(KvHostStorage, ImpossibleAllocationIsOutOfMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer aborts on a petabyte request instead of failing it";
#endif
  HostStorage s(1 << 20);
  EXPECT_EQ(testing::thrown_by([&] { s.grow(int64_t{1} << 40); }).code, ErrorCode::OutOfMemory);  // a petabyte
  EXPECT_EQ(s.rows(), 0);
}

TEST(KvFaultyStorage, FailsTheChosenGrowthOnly) {
  FaultyStorage s(std::make_unique<HostStorage>(8));
  s.fail_nth_growth(2);
  s.grow(4);
  EXPECT_EQ(testing::thrown_by([&] { s.grow(8); }).code, ErrorCode::OutOfMemory);
  EXPECT_EQ(s.rows(), 4);
  s.grow(8);
  EXPECT_EQ(s.rows(), 8);
  EXPECT_EQ(s.failed_growths(), 1);
  s.fail_every_growth(true);
  EXPECT_THROW(s.grow(16), Error);
}

TEST(KvGrowthPolicy, DoublesNeverPastTwiceTheNeedAndCaps) {
  EXPECT_EQ(growth_target(512, 513, 1 << 20, 16, "t"), 1024);
  EXPECT_EQ(growth_target(512, 4096, 1 << 20, 16, "t"), 4096);
  EXPECT_EQ(growth_target(512, 4112, 1 << 20, 16, "t"), 8192);
  EXPECT_EQ(growth_target(512, 3000, 2048 + 1024, 16, "t"), 3072);  // capped
  for (int64_t need = 48; need < 100000; need += 48) {
    const int64_t t = growth_target(32, need, 1 << 20, 16, "t");
    EXPECT_GE(t, need);
    EXPECT_LT(t, 2 * need);
    EXPECT_EQ(t % 16, 0);
  }
  const testing::Thrown refused = testing::thrown_by([] { growth_target(512, 4096, 2048, 16, "kv prepare"); });
  EXPECT_EQ(refused.code, ErrorCode::LimitExceeded);
  EXPECT_EQ(refused.message, "kv prepare: needs 4096 rows, the configured limit is 2048 rows");
}

}  // namespace
}  // namespace cellm::kv
