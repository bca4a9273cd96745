#pragma once
// Fault injection for tests of the cache and of backend storages: wraps a real storage and
// makes chosen growths fail with OutOfMemory before they reach it, as an exhausted device
// would. (A growth failing part-way through its copy is HostStorage's growth hook.)
#include <cstdint>
#include <memory>

#include "kv/storage.h"

namespace cellm::kv {

class FaultyStorage final : public KvStorage {
 public:
  explicit FaultyStorage(std::unique_ptr<KvStorage> inner) : inner_(std::move(inner)) {}

  // The nth grow() call from now (1 = the next one) fails; 0 cancels.
  void fail_nth_growth(int64_t n) { fail_at_ = n == 0 ? 0 : grow_calls_ + n; }
  // While set, every grow() fails.
  void fail_every_growth(bool on) { fail_all_ = on; }
  int64_t grow_calls() const { return grow_calls_; }
  int64_t failed_growths() const { return failed_; }
  KvStorage& inner() const { return *inner_; }

  size_t bytes_per_row() const override { return inner_->bytes_per_row(); }
  int64_t rows() const override { return inner_->rows(); }
  void* base() const override { return inner_->base(); }
  uint64_t binding_epoch() const override { return inner_->binding_epoch(); }
  bool last_growth_moved() const override { return inner_->last_growth_moved(); }
  void grow(int64_t rows_wanted) override;
  void copy_rows(std::span<const RowCopy> copies) override { inner_->copy_rows(copies); }

 private:
  std::unique_ptr<KvStorage> inner_;
  int64_t grow_calls_ = 0;
  int64_t fail_at_ = 0;
  int64_t failed_ = 0;
  bool fail_all_ = false;
};

}  // namespace cellm::kv
