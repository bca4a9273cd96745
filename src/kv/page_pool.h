#pragma once
// The pool of a cell cache cut into pages of P cells (page p = pool rows [p*P, (p+1)*P)):
// the storage, a reference count per page, the free pages, and cell_pos (the position each
// row holds, as kernels see it). Placement never scans the pool: free pages come from a
// min-heap (lowest page first, which keeps the used part of the pool compact).
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "kv/storage.h"

namespace cellm::kv {

// cell_pos of a free cell. Larger than any position, so "cell_pos <= pos_i" rejects it.
inline constexpr int32_t kFreeCellPos = std::numeric_limits<int32_t>::max();

class PagePool {
 public:
  // Allocates initial_rows; every row count is a multiple of page_cells.
  PagePool(std::unique_ptr<KvStorage> storage, int32_t page_cells, int64_t initial_rows, int64_t max_rows);

  int32_t page_cells() const { return page_cells_; }
  int64_t rows() const { return storage_->rows(); }
  int64_t max_rows() const { return max_rows_; }
  int64_t page_count() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_pages() const { return static_cast<int64_t>(free_heap_.size()); }
  int64_t pages_in_use() const { return page_count() - free_pages(); }
  int64_t shared_pages() const { return shared_pages_; }
  // Pages that could still be had: free ones plus those growth up to max_rows would add.
  int64_t pages_within_limit() const { return free_pages() + (max_rows_ - rows()) / page_cells_; }
  int64_t growth_count() const { return growth_count_; }
  KvStorage& storage() const { return *storage_; }

  // Makes at least n pages free, growing the storage if needed. Transactional: on failure
  // (LimitExceeded past max_rows, OutOfMemory from the storage) nothing changes.
  void reserve_free(int64_t n, const char* what);
  // Takes the lowest free page (one must be free) with one reference.
  int32_t take();
  int32_t refs(int32_t page) const { return refs_[static_cast<size_t>(page)]; }
  void add_ref(int32_t page);
  // Drops a reference; at zero the page is free again and its cells read kFreeCellPos.
  // Returns whether the page was freed.
  bool drop_ref(int32_t page);

  // The cell table's position column (rows entries) and its upkeep.
  std::span<const int32_t> cell_pos() const { return cell_pos_; }
  int32_t cell_pos(int64_t row) const { return cell_pos_[static_cast<size_t>(row)]; }
  void set_cell_pos(int64_t row, int32_t pos);

  // Rows of cell_pos changed since the last mark_synced(). all_changed instead after a growth
  // or when the changes pass an eighth of the pool (a full upload is then the cheaper sync).
  bool all_cell_pos_changed() const { return all_changed_; }
  std::span<const int64_t> changed_cell_pos_rows() const { return changed_rows_; }
  void mark_synced();

 private:
  void grow_to(int64_t target_rows, const char* what);

  std::unique_ptr<KvStorage> storage_;
  int32_t page_cells_;
  int64_t max_rows_;
  std::vector<int32_t> refs_;       // per page
  std::vector<int32_t> free_heap_;  // min-heap of free page ids
  std::vector<int32_t> cell_pos_;   // per row
  std::vector<uint8_t> changed_;    // per row: already in changed_rows_
  std::vector<int64_t> changed_rows_;
  bool all_changed_ = true;
  int64_t shared_pages_ = 0;
  int64_t growth_count_ = 0;
};

}  // namespace cellm::kv
