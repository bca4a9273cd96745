#pragma once
// The growth policy shared by both layouts: geometric (doubling), never above 2x the rows
// needed, in whole granules (pages), capped by a configured limit.
#include <cstdint>

#include "kv/storage.h"

namespace cellm::kv {

// Rows to grow a pool of current_rows to so that rows_needed fit: current_rows doubled until
// it reaches rows_needed, capped at max_rows. current_rows, rows_needed and max_rows are
// multiples of granule. Since doubling stops at the first value >= rows_needed, the result is
// below 2 x rows_needed. Throws LimitExceeded (naming `what`) when rows_needed > max_rows.
int64_t growth_target(int64_t current_rows, int64_t rows_needed, int64_t max_rows, int64_t granule, const char* what);

// Rounds a configured row count to a multiple of granule (up for a floor, down for a cap).
int64_t round_up(int64_t rows, int64_t granule);
int64_t round_down(int64_t rows, int64_t granule);

// storage.grow(target) with the storage contract enforced: any failure surfaces as
// cellm::Error (OutOfMemory for an allocation failure), and a storage that reports a row count
// other than the one asked is a bug (Internal).
void grow_storage(KvStorage& storage, int64_t target_rows, const char* what);

}  // namespace cellm::kv
