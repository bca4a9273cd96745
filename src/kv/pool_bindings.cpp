#include "kv/pool_bindings.h"

#include "core/error.h"

namespace cellm::kv {

namespace {

BoundTensor pool_binding(const Geometry& geometry, const KvStorage& storage, int32_t layer, bool value) {
  if (storage.bytes_per_row() != geometry.bytes_per_cell()) {
    fail(ErrorCode::InvalidArgument, "kv pool binding: storage rows are ", storage.bytes_per_row(),
         " bytes, the geometry's cells are ", geometry.bytes_per_cell());
  }
  const LayerGeometry& g = geometry.layer(layer);
  const size_t offset = value ? geometry.v_offset(layer) : geometry.k_offset(layer);
  auto* base = static_cast<const std::byte*>(storage.base());
  return BoundTensor{value ? binding_name::v_pool(layer) : binding_name::k_pool(layer),
                     g.dtype,
                     {storage.rows(), g.n_kv_heads, g.head_dim},
                     static_cast<int64_t>(geometry.bytes_per_cell()),
                     base == nullptr ? nullptr : base + offset};
}

}  // namespace

BoundTensor k_pool_binding(const Geometry& geometry, const KvStorage& storage, int32_t layer) {
  return pool_binding(geometry, storage, layer, false);
}

BoundTensor v_pool_binding(const Geometry& geometry, const KvStorage& storage, int32_t layer) {
  return pool_binding(geometry, storage, layer, true);
}

std::vector<BoundTensor> pool_bindings(const Geometry& geometry, const KvStorage& storage) {
  std::vector<BoundTensor> out;
  for (int32_t l = 0; l < geometry.layer_count(); ++l) {
    out.push_back(k_pool_binding(geometry, storage, l));
    out.push_back(v_pool_binding(geometry, storage, l));
  }
  return out;
}

}  // namespace cellm::kv
