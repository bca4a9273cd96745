#include "kv/page_pool.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "kv/growth.h"

namespace cellm::kv {

namespace {

int32_t checked_page_cells(int32_t page_cells) {
  if (page_cells <= 0) fail(ErrorCode::InvalidArgument, "kv cell cache: page_cells is ", page_cells, ", must be > 0");
  return page_cells;
}

}  // namespace

PagePool::PagePool(std::unique_ptr<KvStorage> storage, int32_t page_cells, int64_t initial_rows, int64_t max_rows)
    : storage_(std::move(storage)),
      page_cells_(checked_page_cells(page_cells)),
      max_rows_(round_down(max_rows, page_cells_)) {
  if (storage_ == nullptr) fail(ErrorCode::InvalidArgument, "kv cell cache: no storage");
  if (storage_->rows() != 0) fail(ErrorCode::InvalidArgument, "kv cell cache: the storage is already allocated");
  const int64_t initial = round_up(std::max<int64_t>(initial_rows, page_cells), page_cells);
  if (initial > max_rows_) {
    fail(ErrorCode::InvalidArgument, "kv cell cache: initial_rows ", initial, " exceed max_rows ", max_rows_,
         " (both in whole pages of ", page_cells, " cells)");
  }
  if (max_rows_ > std::numeric_limits<int32_t>::max()) {
    fail(ErrorCode::InvalidArgument, "kv cell cache: max_rows ", max_rows_,
         " exceed the int32 row ids of the side buffers");
  }
  grow_to(initial, "kv cell cache: initial allocation");
  growth_count_ = 0;  // the initial allocation is not a growth
}

void PagePool::reserve_free(int64_t n, const char* what) {
  if (n <= free_pages()) return;
  const int64_t rows_needed = (pages_in_use() + n) * page_cells_;
  grow_to(growth_target(rows(), rows_needed, max_rows_, page_cells_, what), what);
}

void PagePool::grow_to(int64_t target_rows, const char* what) {
  const auto rows = static_cast<size_t>(target_rows);
  const auto pages = static_cast<size_t>(target_rows / page_cells_);
  // Every host-side allocation happens before the storage grows, so a failure anywhere
  // leaves the pool as it was (capacity aside).
  cell_pos_.reserve(rows);
  changed_.reserve(rows);
  refs_.reserve(pages);
  free_heap_.reserve(pages);
  changed_rows_.reserve(rows / 8 + static_cast<size_t>(page_cells_));
  grow_storage(*storage_, target_rows, what);
  // Commit point: nothing below allocates.
  const auto first_new_page = static_cast<int32_t>(refs_.size());
  cell_pos_.resize(rows, kFreeCellPos);
  changed_.resize(rows, 0);
  refs_.resize(pages, 0);
  for (auto p = static_cast<int32_t>(pages) - 1; p >= first_new_page; --p) {
    free_heap_.push_back(p);
    std::push_heap(free_heap_.begin(), free_heap_.end(), std::greater<>());
  }
  all_changed_ = true;
  ++growth_count_;
}

int32_t PagePool::take() {
  if (free_heap_.empty()) fail(ErrorCode::Internal, "kv page pool: take() with no free page");
  std::pop_heap(free_heap_.begin(), free_heap_.end(), std::greater<>());
  const int32_t page = free_heap_.back();
  free_heap_.pop_back();
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

void PagePool::add_ref(int32_t page) {
  if (++refs_[static_cast<size_t>(page)] == 2) ++shared_pages_;
}

bool PagePool::drop_ref(int32_t page) {
  const int32_t left = --refs_[static_cast<size_t>(page)];
  if (left == 1) --shared_pages_;
  if (left > 0) return false;
  const int64_t first = int64_t{page} * page_cells_;
  for (int64_t row = first; row < first + page_cells_; ++row) {
    if (cell_pos_[static_cast<size_t>(row)] != kFreeCellPos) set_cell_pos(row, kFreeCellPos);
  }
  free_heap_.push_back(page);  // capacity reserved at growth: never allocates
  std::push_heap(free_heap_.begin(), free_heap_.end(), std::greater<>());
  return true;
}

void PagePool::set_cell_pos(int64_t row, int32_t pos) {
  const auto r = static_cast<size_t>(row);
  cell_pos_[r] = pos;
  if (all_changed_ || changed_[r] != 0) return;
  if (changed_rows_.size() == changed_rows_.capacity()) {
    all_changed_ = true;  // so many changes that a full upload is cheaper; never allocates
    return;
  }
  changed_[r] = 1;
  changed_rows_.push_back(row);
}

void PagePool::mark_synced() {
  for (int64_t row : changed_rows_) changed_[static_cast<size_t>(row)] = 0;
  changed_rows_.clear();
  all_changed_ = false;
}

}  // namespace cellm::kv
