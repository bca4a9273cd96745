#pragma once
// What a cache reports (DESIGN.md section 6's KV figures).
#include <cstddef>
#include <cstdint>

namespace cellm::kv {

struct CacheMetrics {
  int64_t rows = 0;             // pool rows allocated (cells of capacity)
  int64_t live_cells = 0;       // occupied cells, each counted once however many owners share it
  int64_t peak_live_cells = 0;  // the most live_cells ever committed
  int64_t pages_in_use = 0;     // pages held by some sequence (cell layout; 0 otherwise)
  int64_t shared_cells = 0;     // live cells owned by two or more sequences
  int64_t growth_count = 0;     // successful growths after the initial allocation
  size_t allocated_bytes = 0;   // rows x bytes_per_cell, always
  size_t bytes_per_cell = 0;
  int64_t sequences = 0;       // sequences alive
  uint64_t binding_epoch = 0;  // the storage's: changes whenever the pool moved

  bool operator==(const CacheMetrics&) const = default;
};

}  // namespace cellm::kv
