#pragma once
// The shape of the KV cache: what one cached token ("cell") holds for every layer.
//
// Pool rows are CELL-MAJOR: one row is one cell and holds every layer's K and V for that
// cell, laid out layer by layer as [K of layer 0][V of layer 0][K of layer 1]... . A layer's
// K (or V) view is therefore a strided tensor
//     base + k_offset(l) + row * bytes_per_cell  ->  elements [n_kv_heads][head_dim] of dtype(l)
// so growing the pool by one chunk of memory adds chunk / bytes_per_cell rows for all layers
// at once (DESIGN.md section 5).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace cellm::kv {

struct LayerGeometry {
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t window = 0;        // 0 = full history; w > 0 = a query at pos p sees (p - w, p]
  DType dtype = DType::F16;  // F16 (default), BF16 or F32
};

class Geometry {
 public:
  Geometry() = default;
  // Throws InvalidArgument naming the layer and field when a layer is malformed.
  explicit Geometry(std::vector<LayerGeometry> layers);

  int32_t layer_count() const { return static_cast<int32_t>(layers_.size()); }
  const LayerGeometry& layer(int32_t l) const { return layers_.at(static_cast<size_t>(l)); }
  const std::vector<LayerGeometry>& layers() const { return layers_; }

  // Sum over layers of 2 x n_kv_heads x head_dim x dtype size: the bytes of one pool row.
  size_t bytes_per_cell() const { return bytes_per_cell_; }
  // Bytes of one layer's K (equally V) inside a row: n_kv_heads x head_dim x dtype size.
  size_t kv_bytes(int32_t l) const;
  size_t k_offset(int32_t l) const { return offsets_.at(static_cast<size_t>(l)); }
  size_t v_offset(int32_t l) const { return k_offset(l) + kv_bytes(l); }

  // The distinct windows in ascending order (0, the full history, first when present). Side
  // buffers that depend on the window (mask, page lists) exist once per distinct window.
  const std::vector<int32_t>& windows() const { return windows_; }
  int32_t window_count() const { return static_cast<int32_t>(windows_.size()); }
  // Index into windows() of layer l's window.
  int32_t window_index(int32_t l) const { return window_index_.at(static_cast<size_t>(l)); }

  // The layers whose window is `window`, as a geometry of their own (offsets recomputed).
  // The single-session layout keeps one region per distinct window.
  Geometry select_window(int32_t window) const;

 private:
  std::vector<LayerGeometry> layers_;
  std::vector<size_t> offsets_;
  std::vector<int32_t> windows_;
  std::vector<int32_t> window_index_;
  size_t bytes_per_cell_ = 0;
};

}  // namespace cellm::kv
