#pragma once
// "bind": the K and V views of every layer into one cell-major pool, named as the manifest
// names them. Rebuild them whenever the storage's binding epoch changes.
#include <vector>

#include "kv/geometry.h"
#include "kv/manifest.h"
#include "kv/storage.h"

namespace cellm::kv {

// kv.k.<l> / kv.v.<l>: data = base + k_offset(l) / v_offset(l), dims [rows, n_kv_heads,
// head_dim], row stride bytes_per_cell. Throws InvalidArgument when the storage's row size
// is not the geometry's bytes_per_cell.
BoundTensor k_pool_binding(const Geometry& geometry, const KvStorage& storage, int32_t layer);
BoundTensor v_pool_binding(const Geometry& geometry, const KvStorage& storage, int32_t layer);
std::vector<BoundTensor> pool_bindings(const Geometry& geometry, const KvStorage& storage);

}  // namespace cellm::kv
