#include "kv/manifest.h"

#include "core/error.h"

namespace cellm::kv {

namespace {

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    text += dims[i] == kRuntimeExtent ? std::string("*") : std::to_string(dims[i]);
  }
  return text + "]";
}

struct Mismatch {
  ErrorCode code;
  std::string message;
};

std::optional<Mismatch> mismatch(const TensorSpec& spec, const BoundTensor& bound) {
  if (bound.data == nullptr)
    return Mismatch{ErrorCode::NotFound, str_cat("binding '", spec.name, "' is not bound (null data)")};
  if (bound.dtype != spec.dtype) {
    return Mismatch{ErrorCode::InvalidArgument, str_cat("binding '", spec.name, "' has dtype ", dtype_name(bound.dtype),
                                                        ", the manifest declares ", dtype_name(spec.dtype))};
  }
  bool shape_ok = bound.dims.size() == spec.dims.size();
  for (size_t i = 0; shape_ok && i < spec.dims.size(); ++i) {
    shape_ok = bound.dims[i] >= 0 && (spec.dims[i] == kRuntimeExtent || spec.dims[i] == bound.dims[i]);
  }
  if (!shape_ok) {
    return Mismatch{ErrorCode::InvalidArgument, str_cat("binding '", spec.name, "' has shape ", dims_text(bound.dims),
                                                        ", the manifest declares ", dims_text(spec.dims))};
  }
  if (spec.row_stride != kRuntimeExtent && bound.row_stride != spec.row_stride) {
    return Mismatch{ErrorCode::InvalidArgument, str_cat("binding '", spec.name, "' has row stride ", bound.row_stride,
                                                        " bytes, the manifest declares ", spec.row_stride)};
  }
  return std::nullopt;
}

const BoundTensor* find_bound(std::span<const BoundTensor> bindings, const std::string& name) {
  for (const BoundTensor& b : bindings) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::optional<Mismatch> find_first_mismatch(const Manifest& manifest, std::span<const BoundTensor> bindings) {
  for (const TensorSpec& spec : manifest.specs()) {
    const BoundTensor* bound = find_bound(bindings, spec.name);
    if (bound == nullptr) return Mismatch{ErrorCode::NotFound, str_cat("binding '", spec.name, "' is missing")};
    if (auto why = mismatch(spec, *bound)) return why;
  }
  for (const BoundTensor& b : bindings) {
    if (manifest.find(b.name) == nullptr) {
      return Mismatch{ErrorCode::InvalidArgument, str_cat("binding '", b.name, "' is not declared by the manifest")};
    }
  }
  return std::nullopt;
}

}  // namespace

void Manifest::declare(TensorSpec spec) {
  if (find(spec.name) != nullptr) fail(ErrorCode::InvalidArgument, "manifest: '", spec.name, "' declared twice");
  specs_.push_back(std::move(spec));
}

const TensorSpec* Manifest::find(std::string_view name) const {
  for (const TensorSpec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::optional<std::string> Manifest::first_mismatch(std::span<const BoundTensor> bindings) const {
  auto why = find_first_mismatch(*this, bindings);
  if (!why) return std::nullopt;
  return why->message;
}

void Manifest::validate(std::span<const BoundTensor> bindings) const {
  if (auto why = find_first_mismatch(*this, bindings)) fail(why->code, why->message);
}

namespace binding_name {
std::string k_pool(int32_t layer) { return str_cat("kv.k.", layer); }
std::string v_pool(int32_t layer) { return str_cat("kv.v.", layer); }
std::string mask(int32_t window) { return str_cat("kv.mask.w", window); }
std::string page_rows(int32_t window) { return str_cat("kv.page_rows.w", window); }
std::string pages(int32_t window) { return str_cat("kv.pages.w", window); }
}  // namespace binding_name

void declare_kv_bindings(Manifest& manifest, const Geometry& geometry, int32_t max_write, KvSideBuffers wanted) {
  if (max_write <= 0) fail(ErrorCode::InvalidArgument, "kv manifest: max_write is ", max_write, ", must be > 0");
  const auto stride = static_cast<int64_t>(geometry.bytes_per_cell());
  for (int32_t l = 0; l < geometry.layer_count(); ++l) {
    const LayerGeometry& g = geometry.layer(l);
    const std::vector<int64_t> dims = {kRuntimeExtent, g.n_kv_heads, g.head_dim};
    manifest.declare({binding_name::k_pool(l), g.dtype, dims, stride});
    manifest.declare({binding_name::v_pool(l), g.dtype, dims, stride});
  }
  manifest.declare({binding_name::kCells, DType::I32, {max_write}, 0});
  manifest.declare({binding_name::kCellPos, DType::I32, {kRuntimeExtent}, 0});
  manifest.declare({binding_name::kReadLen, DType::I32, {1}, 0});
  for (int32_t window : geometry.windows()) {
    if (wanted.dense_masks) manifest.declare({binding_name::mask(window), DType::I8, {max_write, kRuntimeExtent}, 0});
    if (wanted.page_lists) {
      manifest.declare({binding_name::page_rows(window), DType::I32, {int64_t{max_write} + 1}, 0});
      manifest.declare({binding_name::pages(window), DType::I32, {kRuntimeExtent}, 0});
    }
  }
}

}  // namespace cellm::kv
