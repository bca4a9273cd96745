// The rules of the cell layout, one test each (DESIGN.md section 4, issue #4 items 3-5, 7).
#include "kv/cell_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

using testing::append;
using testing::capture;
using testing::kernel_visible_cells;
using testing::make_cache;
using testing::windows_geometry;

ErrorCode code_of(const std::function<void()>& f, std::string* message = nullptr) {
  const testing::Thrown thrown = testing::thrown_by(f);
  if (message != nullptr) *message = thrown.message;
  return thrown.code;
}

TEST(KvCellCache, TokensFillPagesOfPCellsSlotByPosition) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId a = t->create();
  const SeqId b = t->create();
  const auto a_cells = append(*t, a, 6);
  const auto b_cells = append(*t, b, 1);
  ASSERT_EQ(t->pages_of(a).size(), 2u);
  ASSERT_EQ(t->pages_of(b).size(), 1u);
  for (int32_t pos = 0; pos < 6; ++pos) {
    EXPECT_EQ(a_cells[static_cast<size_t>(pos)], t->pages_of(a)[static_cast<size_t>(pos / 4)] * 4 + pos % 4);
    EXPECT_EQ(t->cell_pos()[static_cast<size_t>(a_cells[static_cast<size_t>(pos)])], pos);
  }
  EXPECT_EQ(b_cells[0] % 4, 0);
  // Lowest free page first: a took 0 and 1, b took 2.
  EXPECT_EQ(t->pages_of(a)[0], 0);
  EXPECT_EQ(t->pages_of(a)[1], 1);
  EXPECT_EQ(t->pages_of(b)[0], 2);
}

TEST(KvCellCache, MetricsCountOccupiedCellsNotExtents) {
  auto t = make_cache(windows_geometry({0, 4}), {.page_cells = 16});
  const SeqId a = t->create();
  const SeqId b = t->create();
  append(*t, a, 1);
  append(*t, b, 17);
  CacheMetrics m = t->metrics();
  EXPECT_EQ(m.live_cells, 18);
  EXPECT_EQ(m.pages_in_use, 3);
  EXPECT_EQ(m.rows, 512);
  EXPECT_EQ(m.allocated_bytes, 512u * t->geometry().bytes_per_cell());
  EXPECT_EQ(m.bytes_per_cell, 2u * 2 * 4 * 4);
  EXPECT_EQ(m.sequences, 2);
  EXPECT_EQ(m.shared_cells, 0);
  t->remove(b);
  m = t->metrics();
  EXPECT_EQ(m.live_cells, 1);
  EXPECT_EQ(m.peak_live_cells, 18);
  EXPECT_EQ(m.pages_in_use, 1);
  EXPECT_EQ(m.sequences, 1);
}

TEST(KvCellCache, PositionsMustContinueEachSequence) {
  auto t = make_cache(windows_geometry({0}));
  const SeqId a = t->create();
  const SeqId b = t->create();
  append(*t, a, 3);
  const auto before = capture(*t, 2);
  std::string msg;
  const SeqId ids[] = {a, b, a};
  const int32_t skip[] = {4, 0, 5};
  EXPECT_EQ(code_of([&] { t->prepare({ids, 1}, {skip, 1}); }, &msg), ErrorCode::InvalidArgument);
  EXPECT_EQ(msg, "kv prepare: token 0 of sequence 0 has position 4, expected 3 (the sequence's next position)");
  const int32_t repeat[] = {3, 0, 3};
  EXPECT_EQ(code_of([&] { t->prepare(ids, repeat); }, &msg), ErrorCode::InvalidArgument);
  EXPECT_NE(msg.find("token 2 of sequence 0 has position 3, expected 4"), std::string::npos) << msg;
  const SeqId backwards_ids[] = {b, b};
  const int32_t backwards[] = {1, 0};
  EXPECT_EQ(code_of([&] { t->prepare(backwards_ids, backwards); }), ErrorCode::InvalidArgument);
  const SeqId ghost[] = {7};
  const int32_t zero[] = {0};
  EXPECT_EQ(code_of([&] { t->prepare(ghost, zero); }, &msg), ErrorCode::NotFound);
  EXPECT_NE(msg.find("sequence 7"), std::string::npos);
  EXPECT_EQ(code_of([&] { t->prepare({ids, 2}, {zero, 1}); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { t->prepare({}, {}); }), ErrorCode::InvalidArgument);
  EXPECT_FALSE(t->step_pending());
  EXPECT_EQ(capture(*t, 2), before);
  // A prefill chunk of one sequence beside decode rows of another, interleaved, is fine.
  const int32_t good[] = {3, 0, 4};
  EXPECT_NO_THROW(t->prepare(ids, good));
  t->commit();
  EXPECT_EQ(t->length(a), 5);
  EXPECT_EQ(t->length(b), 1);
}

TEST(KvCellCache, StepLongerThanMaxWriteIsALimit) {
  auto t = make_cache(windows_geometry({0}), {.max_write = 4});
  const SeqId a = t->create();
  std::vector<SeqId> ids(5, a);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  EXPECT_EQ(code_of([&] { t->prepare(ids, pos); }), ErrorCode::LimitExceeded);
}

TEST(KvCellCache, RowsSeeTheirOwnSequenceOnlyAndCausally) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId a = t->create();
  const SeqId b = t->create();
  append(*t, a, 5);
  append(*t, b, 3);
  const SeqId ids[] = {b, a, a, b};
  const int32_t pos[] = {3, 5, 6, 4};
  const StepBuffers& step = t->prepare(ids, pos);
  for (size_t i = 0; i < 4; ++i) {
    auto cells = kernel_visible_cells(*t, 0, i, pos[i]);
    std::vector<int32_t> seen;
    for (int64_t c : cells) seen.push_back(t->cell_pos()[static_cast<size_t>(c)]);
    std::sort(seen.begin(), seen.end());
    std::vector<int32_t> expected(static_cast<size_t>(pos[i]) + 1);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(seen, expected) << "row " << i;
    for (int64_t c : cells) EXPECT_EQ(t->owners(c), std::vector<SeqId>{ids[i]}) << "row " << i << " cell " << c;
    EXPECT_TRUE(std::find(cells.begin(), cells.end(), step.cells[i]) != cells.end());
    EXPECT_LE(cells.back(), step.read_len - 1);
  }
  t->commit();
}

TEST(KvCellCache, WindowedListsSkipPagesOutsideTheWindow) {
  auto t = make_cache(windows_geometry({0, 4, 40}), {.page_cells = 16});
  const SeqId a = t->create();
  append(*t, a, 100);
  const SeqId ids[] = {a};
  const int32_t pos[] = {100};
  const StepBuffers& step = t->prepare(ids, pos);
  const auto count = [&](int wi) { return step.windows[static_cast<size_t>(wi)].page_rows[1]; };
  EXPECT_EQ(step.windows[0].window, 0);
  EXPECT_EQ(count(0), 7);  // pages 0..6
  EXPECT_EQ(count(1), 1);  // positions 97..100: page 6
  EXPECT_EQ(count(2), 4);  // positions 61..100: pages 3..6
  EXPECT_EQ(step.windows[2].pages[0], t->pages_of(a)[3]);
  EXPECT_EQ(kernel_visible_cells(*t, 1, 0, 100).size(), 4u);
  EXPECT_EQ(kernel_visible_cells(*t, 2, 0, 100).size(), 40u);
  EXPECT_EQ(kernel_visible_cells(*t, 0, 0, 100).size(), 101u);
  t->abort();
}

TEST(KvCellCache, AbortLeavesEverythingAsBefore) {
  auto t = make_cache(windows_geometry({0, 4}), {.page_cells = 4});
  const SeqId a = t->create();
  const SeqId b = t->create();
  append(*t, a, 6);
  const auto before = capture(*t, 2);
  const SeqId ids[] = {a, a, a, b, b, b, b, b};
  const int32_t pos[] = {6, 7, 8, 0, 1, 2, 3, 4};
  const std::vector<int32_t> first_cells = t->prepare(ids, pos).cells;
  EXPECT_NE(capture(*t, 2).cell_pos, before.cell_pos);
  t->abort();
  EXPECT_EQ(capture(*t, 2), before);
  // The free list is as before too: the same step lands on the same cells.
  EXPECT_EQ(t->prepare(ids, pos).cells, first_cells);
  t->commit();
  EXPECT_EQ(t->length(b), 5);
}

TEST(KvCellCache, StructuralChangesWaitForThePendingStep) {
  auto t = make_cache(windows_geometry({0}));
  const SeqId a = t->create();
  append(*t, a, 2);
  const SeqId ids[] = {a};
  const int32_t pos[] = {2};
  t->prepare(ids, pos);
  EXPECT_EQ(code_of([&] { t->remove(a); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { t->rewind(a, 0); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { t->clone(a, 1); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { t->prepare(ids, pos); }), ErrorCode::InvalidArgument);
  const SeqId fresh = t->create();  // creating touches no cell
  t->commit();
  EXPECT_EQ(code_of([&] { t->commit(); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { t->abort(); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(t->length(fresh), 0);
}

TEST(KvCellCache, CloneSharesWholePagesAndCopiesThePartialOne) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId src = t->create();
  const auto src_cells = append(*t, src, 10);
  for (size_t pos = 0; pos < src_cells.size(); ++pos) t.write_tag(src_cells[pos], 1000 + pos);
  const SeqId dst = t->clone(src, 9);
  EXPECT_EQ(t->length(dst), 9);
  ASSERT_EQ(t->pages_of(dst).size(), 3u);
  EXPECT_EQ(t->pages_of(dst)[0], t->pages_of(src)[0]);
  EXPECT_EQ(t->pages_of(dst)[1], t->pages_of(src)[1]);
  EXPECT_NE(t->pages_of(dst)[2], t->pages_of(src)[2]);
  const CacheMetrics m = t->metrics();
  EXPECT_EQ(m.shared_cells, 8);
  EXPECT_EQ(m.live_cells, 10 + 1);  // the copied cell of position 8
  EXPECT_EQ(m.pages_in_use, 4);
  const int64_t copied = int64_t{t->pages_of(dst)[2]} * 4;
  EXPECT_EQ(t.tag(copied), 1008u);
  EXPECT_EQ(t->cell_pos()[static_cast<size_t>(copied)], 8);
  EXPECT_EQ(t->owners(src_cells[3]), (std::vector<SeqId>{src, dst}));
  EXPECT_EQ(t->owners(src_cells[9]), std::vector<SeqId>{src});
  EXPECT_EQ(t->owners(src_cells[8]), std::vector<SeqId>{src});
  EXPECT_EQ(t->owners(copied), std::vector<SeqId>{dst});

  // Both go on; neither sees the other's new tokens.
  const SeqId ids[] = {src, dst};
  const int32_t pos[] = {10, 9};
  const StepBuffers& step = t->prepare(ids, pos);
  t.write_tag(step.cells[0], 2010);
  t.write_tag(step.cells[1], 3009);
  std::vector<uint64_t> src_sees, dst_sees;
  for (int64_t c : kernel_visible_cells(*t, 0, 0, 10)) src_sees.push_back(t.tag(c));
  for (int64_t c : kernel_visible_cells(*t, 0, 1, 9)) dst_sees.push_back(t.tag(c));
  std::sort(src_sees.begin(), src_sees.end());
  std::sort(dst_sees.begin(), dst_sees.end());
  EXPECT_EQ(src_sees, (std::vector<uint64_t>{1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 2010}));
  EXPECT_EQ(dst_sees, (std::vector<uint64_t>{1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 3009}));
  t->commit();
}

TEST(KvCellCache, CloneAtAPageBoundaryCopiesNothing) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId src = t->create();
  append(*t, src, 8);
  const SeqId dst = t->clone(src, 8);
  EXPECT_EQ(t->metrics().live_cells, 8);
  EXPECT_EQ(t->metrics().shared_cells, 8);
  const SeqId empty = t->clone(src, 0);
  EXPECT_EQ(t->length(empty), 0);
  EXPECT_EQ(code_of([&] { t->clone(src, 9); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { t->clone(99, 0); }), ErrorCode::NotFound);
  append(*t, dst, 1);  // into a fresh page of its own
  EXPECT_EQ(t->pages_of(dst).size(), 3u);
  EXPECT_EQ(t->metrics().shared_cells, 8);
}

TEST(KvCellCache, ACellIsFreedWhenItsLastOwnerLeaves) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId src = t->create();
  const auto cells = append(*t, src, 8);
  const SeqId a = t->clone(src, 8);
  const SeqId b = t->clone(src, 4);
  t->remove(src);
  EXPECT_EQ(t->metrics().live_cells, 8);
  EXPECT_EQ(t->cell_pos()[static_cast<size_t>(cells[7])], 7);
  EXPECT_EQ(t->owners(cells[0]), (std::vector<SeqId>{a, b}));
  t->remove(a);
  EXPECT_EQ(t->metrics().live_cells, 4);
  EXPECT_EQ(t->cell_pos()[static_cast<size_t>(cells[7])], kFreeCellPos);
  EXPECT_EQ(t->metrics().shared_cells, 0);
  t->remove(b);
  const CacheMetrics m = t->metrics();
  EXPECT_EQ(m.live_cells, 0);
  EXPECT_EQ(m.pages_in_use, 0);
  EXPECT_EQ(m.sequences, 0);
  EXPECT_TRUE(std::all_of(t->cell_pos().begin(), t->cell_pos().end(), [](int32_t p) { return p == kFreeCellPos; }));
  EXPECT_EQ(code_of([&] { t->remove(b); }), ErrorCode::NotFound);
}

TEST(KvCellCache, RewindForgetsTheTailAndReusesItsCells) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId a = t->create();
  const auto cells = append(*t, a, 10);
  t->rewind(a, 6);
  EXPECT_EQ(t->length(a), 6);
  EXPECT_EQ(t->pages_of(a).size(), 2u);
  EXPECT_EQ(t->metrics().live_cells, 6);
  EXPECT_EQ(t->cell_pos()[static_cast<size_t>(cells[6])], kFreeCellPos);
  EXPECT_EQ(t->cell_pos()[static_cast<size_t>(cells[9])], kFreeCellPos);
  EXPECT_EQ(append(*t, a, 1)[0], cells[6]);
  t->rewind(a, 4);  // a page boundary: the second page goes back
  EXPECT_EQ(t->pages_of(a).size(), 1u);
  EXPECT_EQ(t->metrics().pages_in_use, 1);
  EXPECT_EQ(code_of([&] { t->rewind(a, 5); }), ErrorCode::InvalidArgument);
  t->rewind(a, 0);
  EXPECT_EQ(t->metrics().live_cells, 0);
  EXPECT_EQ(t->metrics().pages_in_use, 0);
}

TEST(KvCellCache, RewindIntoASharedPageCopiesTheKeptPart) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  const SeqId src = t->create();
  const auto cells = append(*t, src, 8);
  for (size_t pos = 0; pos < cells.size(); ++pos) t.write_tag(cells[pos], 100 + pos);
  const SeqId dst = t->clone(src, 8);
  t->rewind(dst, 6);
  EXPECT_EQ(t->pages_of(dst)[0], t->pages_of(src)[0]);
  EXPECT_NE(t->pages_of(dst)[1], t->pages_of(src)[1]);
  EXPECT_EQ(t->metrics().shared_cells, 4);
  EXPECT_EQ(t->metrics().live_cells, 8 + 2);
  // dst writes position 6 into its private page; src keeps its own position 6.
  const auto next = append(*t, dst, 1);
  t.write_tag(next[0], 999);
  EXPECT_EQ(t.tag(cells[6]), 106u);
  EXPECT_EQ(t.tag(int64_t{t->pages_of(dst)[1]} * 4 + 1), 105u);
  EXPECT_EQ(t->cell_pos()[static_cast<size_t>(cells[6])], 6);
  EXPECT_EQ(t->owners(cells[6]), std::vector<SeqId>{src});
}

TEST(KvCellCache, NoCapOnSessions) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 16, .initial_rows = 64});
  std::vector<SeqId> ids;
  for (int i = 0; i < 3000; ++i) ids.push_back(t->create());
  std::vector<int32_t> pos(ids.size(), 0);
  for (size_t at = 0; at < ids.size(); at += 500) {
    t->prepare(std::span(ids).subspan(at, 500), std::span(pos).subspan(at, 500));
    t->commit();
  }
  EXPECT_EQ(t->metrics().live_cells, 3000);
  EXPECT_EQ(t->metrics().pages_in_use, 3000);
  EXPECT_GE(t->metrics().rows, 3000 * 16);
  // A removed sequence's id is recycled.
  t->remove(ids[17]);
  EXPECT_EQ(t->create(), ids[17]);
}

TEST(KvCellCache, AdmissionCountsPagesAgainstTheLimit) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 16, .initial_rows = 64, .max_rows = 128});
  const SeqId a = t->create();
  append(*t, a, 10);
  const Demand fits[] = {{a, 6}, {kNewSequence, 100}};  // 0 + 7 pages of the 7 left
  EXPECT_EQ(t->pages_needed(fits), 7);
  EXPECT_TRUE(t->can_fit(fits));
  const Demand too_much[] = {{a, 7}, {kNewSequence, 100}};
  EXPECT_EQ(t->pages_needed(too_much), 8);
  EXPECT_FALSE(t->can_fit(too_much));
}

TEST(KvCellCache, CellPosChangesAreTrackedForTheDeviceCopy) {
  auto t = make_cache(windows_geometry({0}), {.page_cells = 4});
  EXPECT_TRUE(t->all_cell_pos_changed());  // nothing uploaded yet
  t->mark_cell_pos_synced();
  EXPECT_FALSE(t->all_cell_pos_changed());
  EXPECT_TRUE(t->changed_cell_pos_rows().empty());
  const SeqId a = t->create();
  const auto cells = append(*t, a, 3);
  std::vector<int64_t> changed(t->changed_cell_pos_rows().begin(), t->changed_cell_pos_rows().end());
  EXPECT_EQ(changed, (std::vector<int64_t>{cells[0], cells[1], cells[2]}));
  t->mark_cell_pos_synced();
  t->remove(a);
  EXPECT_EQ(t->changed_cell_pos_rows().size(), 3u);
  t->mark_cell_pos_synced();
  const SeqId b = t->create();
  append(*t, b, 300);
  append(*t, b, 300);  // grows the pool
  EXPECT_TRUE(t->all_cell_pos_changed());
}

}  // namespace
}  // namespace cellm::kv
