#pragma once
// The sequence layout (DESIGN.md section 4): one private, flat cache for a single session,
// with no sharing and no pages. Layers are grouped into one region per distinct window, each
// region a cell-major pool of its own layers (geometry.h):
// - the full-history region (window 0) maps position q to row q; it starts at initial_rows
//   and doubles as needed, capped at max_rows, keeping its history across growth;
// - a windowed region (window w) is a ring of R = w + max_write - 1 rows, position q at row
//   q % R, so the longest step (max_write tokens) never overwrites a key its first query
//   still needs.
//
// Kernel rule for a step of T tokens at positions first_pos .. last = first_pos + T - 1
// (each token writes row write_rows[i] of every region first):
//   full region:    query at p sees rows r in [0, read_rows) with r <= p.
//   windowed region: row r holds q(r) = ring_row_position(r, last, R); query at p sees rows
//                   r in [0, read_rows) with q(r) <= p and q(r) > p - w (sequence_row_visible).
//
// Rewind: the full region rewinds anywhere; a ring only keeps max_write positions of slack,
// so with windowed layers rewind(pos) must stay within max_write of the highest position ever
// written (LimitExceeded otherwise).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kv/geometry.h"
#include "kv/manifest.h"
#include "kv/metrics.h"
#include "kv/storage.h"

namespace cellm::kv {

struct SequenceCacheConfig {
  int64_t initial_rows = 512;           // of the full-history region
  int64_t max_rows = int64_t{1} << 20;  // cap of the full-history region
  int32_t max_write = 512;              // most tokens in one step
};

struct SequenceRegion {
  int32_t window = 0;
  Geometry layers;                 // this region's layers, offsets inside its rows
  std::vector<int32_t> layer_ids;  // the model's index of each of them
  int64_t ring_rows = 0;           // R, or 0 for the full-history region
  std::unique_ptr<KvStorage> storage;
};

struct RegionStep {
  std::vector<int32_t> write_rows;  // [T]
  int64_t read_rows = 0;
};

struct SequenceStep {
  int32_t first_pos = 0;
  int32_t n_tokens = 0;
  std::vector<RegionStep> regions;  // as SequenceCache::region(r)
};

// The position held by row `row` of a ring of ring_rows rows once positions up to last_pos
// are written (negative: never written).
inline int64_t ring_row_position(int64_t row, int64_t last_pos, int64_t ring_rows) {
  return last_pos - (((last_pos - row) % ring_rows) + ring_rows) % ring_rows;
}

// The kernel rule above, for row `row` of `region` and a query at pos; last_pos is the last
// position the step wrote.
bool sequence_row_visible(const SequenceRegion& region, int64_t row, int64_t last_pos, int64_t pos);

class SequenceCache {
 public:
  using StorageFactory = std::function<std::unique_ptr<KvStorage>(size_t bytes_per_row)>;
  static StorageFactory host_storage();

  SequenceCache(Geometry geometry, SequenceCacheConfig config, StorageFactory make_storage = host_storage());

  int32_t length() const { return length_; }
  // A step of n_tokens tokens from first_pos, which must be length(). Grows the full region
  // if needed; transactional like CellCache::prepare (LimitExceeded / OutOfMemory).
  const SequenceStep& prepare(int32_t first_pos, int32_t n_tokens);
  void commit();
  void abort();
  bool step_pending() const { return pending_; }
  void rewind(int32_t pos);

  int32_t region_count() const { return static_cast<int32_t>(regions_.size()); }
  const SequenceRegion& region(int32_t r) const { return regions_.at(static_cast<size_t>(r)); }
  int32_t region_of_layer(int32_t layer) const { return geometry_.window_index(layer); }
  // Layer views into their region's storage, named as the manifest names them.
  BoundTensor k_binding(int32_t layer) const;
  BoundTensor v_binding(int32_t layer) const;

  CacheMetrics metrics() const;  // rows and growth of the full region; bytes of all regions
  const Geometry& geometry() const { return geometry_; }

 private:
  BoundTensor binding(int32_t layer, bool value) const;
  SequenceRegion* full_region();

  Geometry geometry_;
  SequenceCacheConfig config_;
  std::vector<SequenceRegion> regions_;
  int32_t length_ = 0;
  int32_t peak_length_ = 0;
  int32_t written_end_ = 0;  // highest position any step wrote, plus one
  int64_t growth_count_ = 0;
  bool pending_ = false;
  SequenceStep step_;
};

}  // namespace cellm::kv
