#include "kv/faulty_storage.h"

#include "core/error.h"

namespace cellm::kv {

void FaultyStorage::grow(int64_t rows_wanted) {
  ++grow_calls_;
  if (fail_all_ || grow_calls_ == fail_at_) {
    ++failed_;
    fail(ErrorCode::OutOfMemory, "kv storage: injected failure of growth call ", grow_calls_, " (", rows(), " -> ",
         rows_wanted, " rows)");
  }
  inner_->grow(rows_wanted);
}

}  // namespace cellm::kv
