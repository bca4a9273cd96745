#include "kv/geometry.h"

#include <algorithm>

#include "core/error.h"

namespace cellm::kv {

namespace {

bool is_kv_dtype(DType type) { return type == DType::F16 || type == DType::BF16 || type == DType::F32; }

void check_layer(const LayerGeometry& layer, size_t l) {
  if (layer.n_kv_heads <= 0)
    fail(ErrorCode::InvalidArgument, "kv geometry: layer ", l, " n_kv_heads is ", layer.n_kv_heads, ", must be > 0");
  if (layer.head_dim <= 0)
    fail(ErrorCode::InvalidArgument, "kv geometry: layer ", l, " head_dim is ", layer.head_dim, ", must be > 0");
  if (layer.window < 0)
    fail(ErrorCode::InvalidArgument, "kv geometry: layer ", l, " window is ", layer.window, ", must be >= 0");
  if (!is_kv_dtype(layer.dtype)) {
    fail(ErrorCode::Unsupported, "kv geometry: layer ", l, " dtype ", dtype_name(layer.dtype),
         " is not a KV dtype (f16, bf16, f32)");
  }
}

}  // namespace

Geometry::Geometry(std::vector<LayerGeometry> layers) : layers_(std::move(layers)) {
  if (layers_.empty()) fail(ErrorCode::InvalidArgument, "kv geometry: no layers");
  for (size_t l = 0; l < layers_.size(); ++l) {
    check_layer(layers_[l], l);
    offsets_.push_back(bytes_per_cell_);
    bytes_per_cell_ += 2 * kv_bytes(static_cast<int32_t>(l));
    windows_.push_back(layers_[l].window);
  }
  std::sort(windows_.begin(), windows_.end());
  windows_.erase(std::unique(windows_.begin(), windows_.end()), windows_.end());
  for (const LayerGeometry& layer : layers_) {
    auto at = std::lower_bound(windows_.begin(), windows_.end(), layer.window);
    window_index_.push_back(static_cast<int32_t>(at - windows_.begin()));
  }
}

size_t Geometry::kv_bytes(int32_t l) const {
  const LayerGeometry& g = layer(l);
  return row_bytes(g.dtype, static_cast<int64_t>(g.n_kv_heads) * g.head_dim);
}

Geometry Geometry::select_window(int32_t window) const {
  std::vector<LayerGeometry> selected;
  for (const LayerGeometry& layer : layers_) {
    if (layer.window == window) selected.push_back(layer);
  }
  if (selected.empty()) fail(ErrorCode::NotFound, "kv geometry: no layer has window ", window);
  return Geometry(std::move(selected));
}

}  // namespace cellm::kv
