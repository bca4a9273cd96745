#include "kv/sequence_cache.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "kv/growth.h"
#include "kv/host_storage.h"

namespace cellm::kv {

bool sequence_row_visible(const SequenceRegion& region, int64_t row, int64_t last_pos, int64_t pos) {
  if (region.ring_rows == 0) return row <= pos;
  const int64_t held = ring_row_position(row, last_pos, region.ring_rows);
  return held >= 0 && held <= pos && held > pos - region.window;
}

SequenceCache::StorageFactory SequenceCache::host_storage() {
  return [](size_t bytes_per_row) { return std::make_unique<HostStorage>(bytes_per_row); };
}

SequenceCache::SequenceCache(Geometry geometry, SequenceCacheConfig config, StorageFactory make_storage)
    : geometry_(std::move(geometry)), config_(config) {
  if (config_.max_write <= 0)
    fail(ErrorCode::InvalidArgument, "kv sequence cache: max_write is ", config_.max_write, ", must be > 0");
  if (config_.initial_rows <= 0 || config_.initial_rows > config_.max_rows) {
    fail(ErrorCode::InvalidArgument, "kv sequence cache: initial_rows ", config_.initial_rows,
         " must be in [1, max_rows ", config_.max_rows, "]");
  }
  for (int32_t window : geometry_.windows()) {
    SequenceRegion region;
    region.window = window;
    region.layers = geometry_.select_window(window);
    for (int32_t l = 0; l < geometry_.layer_count(); ++l) {
      if (geometry_.layer(l).window == window) region.layer_ids.push_back(l);
    }
    region.ring_rows = window == 0 ? 0 : int64_t{window} + config_.max_write - 1;
    region.storage = make_storage(region.layers.bytes_per_cell());
    grow_storage(*region.storage, window == 0 ? config_.initial_rows : region.ring_rows,
                 "kv sequence cache: initial allocation");
    regions_.push_back(std::move(region));
  }
  step_.regions.resize(regions_.size());
}

SequenceRegion* SequenceCache::full_region() {
  return regions_.front().window == 0 ? &regions_.front() : nullptr;  // windows() is ascending
}

const SequenceStep& SequenceCache::prepare(int32_t first_pos, int32_t n_tokens) {
  if (pending_) fail(ErrorCode::InvalidArgument, "kv sequence cache: the previous step is still pending");
  if (first_pos != length_) {
    fail(ErrorCode::InvalidArgument, "kv sequence cache: step starts at position ", first_pos, ", expected ", length_,
         " (the sequence's next position)");
  }
  if (n_tokens <= 0 || n_tokens > config_.max_write) {
    fail(ErrorCode::InvalidArgument, "kv sequence cache: ", n_tokens, " tokens, a step takes 1 to max_write ",
         config_.max_write);
  }
  const int64_t end = int64_t{first_pos} + n_tokens;
  if (end >= std::numeric_limits<int32_t>::max())
    fail(ErrorCode::LimitExceeded, "kv sequence cache: position ", end, " is too large");
  for (RegionStep& rs : step_.regions) rs.write_rows.resize(static_cast<size_t>(n_tokens));
  if (SequenceRegion* full = full_region(); full != nullptr && end > full->storage->rows()) {
    const int64_t target = growth_target(full->storage->rows(), end, config_.max_rows, 1, "kv sequence cache");
    grow_storage(*full->storage, target, "kv sequence cache");
    ++growth_count_;
  }
  // Commit point.
  for (size_t r = 0; r < regions_.size(); ++r) {
    const SequenceRegion& region = regions_[r];
    RegionStep& rs = step_.regions[r];
    for (int32_t i = 0; i < n_tokens; ++i) {
      const int64_t pos = int64_t{first_pos} + i;
      rs.write_rows[static_cast<size_t>(i)] =
          static_cast<int32_t>(region.ring_rows == 0 ? pos : pos % region.ring_rows);
    }
    rs.read_rows = region.ring_rows == 0 ? end : std::min(region.ring_rows, end);
  }
  step_.first_pos = first_pos;
  step_.n_tokens = n_tokens;
  written_end_ = std::max(written_end_, static_cast<int32_t>(end));
  pending_ = true;
  return step_;
}

void SequenceCache::commit() {
  if (!pending_) fail(ErrorCode::InvalidArgument, "kv sequence cache: commit with no step pending");
  length_ = step_.first_pos + step_.n_tokens;
  peak_length_ = std::max(peak_length_, length_);
  pending_ = false;
}

void SequenceCache::abort() {
  if (!pending_) fail(ErrorCode::InvalidArgument, "kv sequence cache: abort with no step pending");
  pending_ = false;  // the ring rows the step may have written held nothing a query still needs
}

void SequenceCache::rewind(int32_t pos) {
  if (pending_) fail(ErrorCode::InvalidArgument, "kv sequence cache: rewind while a step is pending");
  if (pos < 0 || pos > length_) {
    fail(ErrorCode::InvalidArgument, "kv sequence cache: rewind to position ", pos, ", the history is [0, ", length_,
         ")");
  }
  const bool has_ring = regions_.back().ring_rows != 0;
  if (has_ring && written_end_ - pos > config_.max_write) {
    fail(ErrorCode::LimitExceeded, "kv sequence cache: rewind to position ", pos, " is more than max_write ",
         config_.max_write, " behind position ", written_end_ - 1, ", which the windowed layers' rings overwrote");
  }
  length_ = pos;
}

BoundTensor SequenceCache::binding(int32_t layer, bool value) const {
  const SequenceRegion& region = regions_.at(static_cast<size_t>(region_of_layer(layer)));
  const auto local = static_cast<int32_t>(std::find(region.layer_ids.begin(), region.layer_ids.end(), layer) -
                                          region.layer_ids.begin());
  const LayerGeometry& g = geometry_.layer(layer);
  const size_t offset = value ? region.layers.v_offset(local) : region.layers.k_offset(local);
  return BoundTensor{value ? binding_name::v_pool(layer) : binding_name::k_pool(layer),
                     g.dtype,
                     {region.storage->rows(), g.n_kv_heads, g.head_dim},
                     static_cast<int64_t>(region.layers.bytes_per_cell()),
                     static_cast<const std::byte*>(region.storage->base()) + offset};
}

BoundTensor SequenceCache::k_binding(int32_t layer) const { return binding(layer, false); }
BoundTensor SequenceCache::v_binding(int32_t layer) const { return binding(layer, true); }

CacheMetrics SequenceCache::metrics() const {
  CacheMetrics m;
  const SequenceRegion& first = regions_.front();
  m.rows = first.window == 0 ? first.storage->rows() : 0;
  m.live_cells = length_;
  m.peak_live_cells = peak_length_;
  m.growth_count = growth_count_;
  for (const SequenceRegion& region : regions_) {
    m.allocated_bytes += region.storage->allocated_bytes();
    m.binding_epoch += region.storage->binding_epoch();
  }
  m.bytes_per_cell = geometry_.bytes_per_cell();
  m.sequences = 1;
  return m;
}

}  // namespace cellm::kv
