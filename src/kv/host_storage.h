#pragma once
// KvStorage in host memory: the CPU backend's pool and the tests' pool. Growth is copy-growth
// (allocate the new block, copy the old rows, then swap), so every growth moves base() and
// bumps the binding epoch. Rows are 64-byte aligned at row 0 (cache line and AVX-512 width).
#include <cstddef>
#include <functional>
#include <memory>

#include "kv/storage.h"

namespace cellm::kv {

// The points inside HostStorage::grow where a test hook may throw, to prove that a growth
// failing part-way leaves the storage untouched.
enum class GrowthPhase { BeforeAllocate, AfterAllocate, AfterCopy };

class HostStorage final : public KvStorage {
 public:
  static constexpr size_t kAlignment = 64;
  using GrowthHook = std::function<void(GrowthPhase)>;

  explicit HostStorage(size_t bytes_per_row);
  ~HostStorage() override;
  HostStorage(const HostStorage&) = delete;
  HostStorage& operator=(const HostStorage&) = delete;

  size_t bytes_per_row() const override { return bytes_per_row_; }
  int64_t rows() const override { return rows_; }
  void* base() const override { return data_; }
  uint64_t binding_epoch() const override { return epoch_; }
  bool last_growth_moved() const override { return last_growth_moved_; }
  void grow(int64_t rows_wanted) override;
  void copy_rows(std::span<const RowCopy> copies) override;

  std::byte* row(int64_t r) const;
  // Test hook called at each GrowthPhase; whatever it throws aborts the growth cleanly.
  void set_growth_hook(GrowthHook hook) { hook_ = std::move(hook); }

 private:
  size_t bytes_per_row_;
  int64_t rows_ = 0;
  std::byte* data_ = nullptr;
  uint64_t epoch_ = 0;
  bool last_growth_moved_ = false;
  GrowthHook hook_;
};

}  // namespace cellm::kv
