#include "kv/growth.h"

#include <new>

#include "core/error.h"

namespace cellm::kv {

int64_t round_up(int64_t rows, int64_t granule) { return (rows + granule - 1) / granule * granule; }
int64_t round_down(int64_t rows, int64_t granule) { return rows / granule * granule; }

int64_t growth_target(int64_t current_rows, int64_t rows_needed, int64_t max_rows, int64_t granule, const char* what) {
  if (rows_needed > max_rows) {
    fail(ErrorCode::LimitExceeded, what, ": needs ", rows_needed, " rows, the configured limit is ", max_rows, " rows");
  }
  int64_t target = current_rows > 0 ? current_rows : granule;
  while (target < rows_needed) target *= 2;
  return target < max_rows ? target : max_rows;
}

void grow_storage(KvStorage& storage, int64_t target_rows, const char* what) {
  const int64_t before = storage.rows();
  try {
    storage.grow(target_rows);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::OutOfMemory, what, ": growing the pool from ", before, " to ", target_rows, " rows (",
         static_cast<size_t>(target_rows) * storage.bytes_per_row(), " bytes) failed: out of memory");
  }
  if (storage.rows() != target_rows) {
    fail(ErrorCode::Internal, what, ": storage grew to ", storage.rows(), " rows, ", target_rows, " were asked");
  }
}

}  // namespace cellm::kv
