#pragma once
// The memory behind a KV pool, implemented by each backend (host memory here, device memory
// in backend/). kv/ never dereferences base(): it may be a device address.
//
// A storage is a run of rows() rows of bytes_per_row() bytes each (cell-major, see
// geometry.h). Its contract:
// - allocated bytes are exactly rows() x bytes_per_row() as far as the cache accounts them
//   (a backend may map a little more to honour its own granularity);
// - grow(n) is transactional: on success rows() == n and rows [0, old rows) hold the same
//   bytes as before; on failure it throws cellm::Error (OutOfMemory, with the reason) and
//   base(), rows() and binding_epoch() are exactly as before;
// - binding_epoch() increments whenever base() changes (copy-growth), so whoever bound the
//   pool into a program or a captured CUDA graph knows to rebind or recapture. In-place
//   growth (virtual-memory mapping) leaves the epoch alone.
#include <cstddef>
#include <cstdint>
#include <span>

namespace cellm::kv {

// Copy of one whole row (every layer's K and V of a cell) to another row of the same pool.
struct RowCopy {
  int64_t from = 0;
  int64_t to = 0;
};

class KvStorage {
 public:
  virtual ~KvStorage() = default;

  virtual size_t bytes_per_row() const = 0;
  virtual int64_t rows() const = 0;
  // Address of row 0; null while rows() == 0.
  virtual void* base() const = 0;
  virtual uint64_t binding_epoch() const = 0;
  // True when the last successful grow() moved base() (copy-growth), false when it grew in place.
  virtual bool last_growth_moved() const = 0;

  // Makes the storage rows_wanted rows long (rows_wanted > rows()); transactional, see above.
  // The first call is the initial allocation.
  virtual void grow(int64_t rows_wanted) = 0;
  // Copies whole rows inside the pool (clone and rewind of a shared page). The sources and
  // destinations of one call never overlap. Completes before the next use of the storage.
  virtual void copy_rows(std::span<const RowCopy> copies) = 0;

  size_t allocated_bytes() const { return static_cast<size_t>(rows()) * bytes_per_row(); }
};

}  // namespace cellm::kv
