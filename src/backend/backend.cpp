// What backends share: the defaults of the Backend interface and helpers for implementations.
#include "backend/backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace cellm::backend {

TensorRef place_joined_copy(Backend& backend, std::span<const TensorRef> host_parts, const std::string& name) {
  if (host_parts.empty()) fail(ErrorCode::Internal, "stacked weight '", name, "' has no parts");
  const DType dtype = host_parts.front().dtype;
  const int64_t cols = host_parts.front().cols;
  const size_t row = row_bytes(dtype, cols);
  int64_t rows = 0;
  for (const TensorRef& part : host_parts) {
    if (part.dtype != dtype || part.cols != cols)
      fail(ErrorCode::Internal, "stacked weight '", name, "': parts differ in type or width");
    rows += part.rows;
  }
  std::vector<uint8_t> staging(row * static_cast<size_t>(rows));
  size_t at = 0;
  for (const TensorRef& part : host_parts)
    for (int64_t r = 0; r < part.rows; ++r, at += row) std::memcpy(staging.data() + at, part.row<const uint8_t>(r), row);
  const TensorRef placed = backend.place_weight(TensorRef{staging.data(), dtype, rows, cols, row}, name);
  const auto* at_placed = static_cast<const uint8_t*>(placed.data);
  if (at_placed >= staging.data() && at_placed < staging.data() + staging.size())
    fail(ErrorCode::Internal, "the ", backend.name(), " backend kept the staging copy of '", name, "'");
  return placed;
}

void Backend::matmul_add(const TensorRef& x, const TensorRef& w, const TensorRef& residual, const TensorRef& out) {
  matmul(x, w, nullptr, out);
  add(residual, out, out);  // elementwise: out may be an operand
}

void Backend::rope_kv_store(const TensorRef& x, const int32_t* positions, const RopeParams& params,
                            const TensorRef& k, const TensorRef& v, const KvDestination& dst) {
  rope(x, positions, params);
  kv_store(k, v, dst);
}

namespace {

// The product a fused call's default makes of its producer's output x: matmul (+ bias), or
// matmul_add of the residual (which takes no bias).
void product_of(Backend& backend, const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef* residual,
                const TensorRef& out, const char* call) {
  if (residual == nullptr) return backend.matmul(x, w, bias, out);
  if (bias != nullptr) fail(ErrorCode::Internal, call, ": a bias and a residual");
  backend.matmul_add(x, w, *residual, out);
}

}  // namespace

void Backend::rms_norm_matmul(const TensorRef& x, const float* weight, float eps, const TensorRef& normed,
                              const TensorRef& w, const float* bias, const TensorRef& out) {
  rms_norm(x, weight, static_cast<int32_t>(x.cols), eps, normed);
  matmul(normed, w, bias, out);
}

void Backend::attention_matmul(const TensorRef& q, const PagedKv& kv, const int32_t* positions, float scale,
                               const TensorRef& attn_out, const TensorRef& w, const float* bias,
                               const TensorRef* residual, const TensorRef& out) {
  attention(q, kv, positions, scale, attn_out);
  product_of(*this, attn_out, w, bias, residual, out, "attention_matmul");
}

void Backend::rope_kv_store_attention(const TensorRef& x, const int32_t* positions, const RopeParams& params,
                                      const TensorRef& k, const TensorRef& v, const KvDestination& dst,
                                      const TensorRef& q, const PagedKv& kv, float scale, const TensorRef& attn_out,
                                      const TensorRef* w, const float* bias, const TensorRef* residual,
                                      const TensorRef& out) {
  rope_kv_store(x, positions, params, k, v, dst);
  if (w == nullptr) return attention(q, kv, positions, scale, attn_out);
  attention_matmul(q, kv, positions, scale, attn_out, *w, bias, residual, out);
}

void Backend::glu_matmul(const TensorRef& gate, const TensorRef& up, GluActivation act, const TensorRef& glu_out,
                         const TensorRef& w, const float* bias, const TensorRef* residual, const TensorRef& out) {
  glu(gate, up, act, glu_out);
  product_of(*this, glu_out, w, bias, residual, out, "glu_matmul");
}

void* Backend::allocate_host(size_t bytes, const char* what) {
  void* p = std::malloc(std::max<size_t>(bytes, 1));
  if (p == nullptr) fail(ErrorCode::OutOfMemory, "cannot allocate ", bytes, " bytes of host memory for ", what);
  return p;
}

void Backend::release_host(void* p) { std::free(p); }

void Backend::begin_capture() { fail(ErrorCode::Unsupported, "the ", name(), " backend cannot capture graphs"); }

std::unique_ptr<Graph> Backend::end_capture() {
  fail(ErrorCode::Unsupported, "the ", name(), " backend cannot capture graphs");
}

}  // namespace cellm::backend
