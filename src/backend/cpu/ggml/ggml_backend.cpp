#include "backend/cpu/ggml/ggml_backend.h"

#include <array>

#include "backend/cpu/ggml/ggml_attention.h"
#include "backend/cpu/ggml/ggml_rows.h"

namespace cellm::cpu::ggml {

GgmlCpuBackend::GgmlCpuBackend(int n_threads, Build build) : CpuBackend(n_threads), build_(build) {}

std::string GgmlCpuBackend::description() const {
  return CpuBackend::description() + ", ggml numerics of an " + build_name(build_) + " build";
}

backend::TensorRef GgmlCpuBackend::place_weight(const TensorRef& host_weight, const std::string& name) {
  const bool quantized = dtype_info(host_weight.dtype).block_size > 1;
  if (quantized && name != "token_embd.weight") require_product(host_weight.dtype, name);
  return CpuBackend::place_weight(host_weight, name);
}

void GgmlCpuBackend::rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) {
  ggml::rms_norm(pool(), x, weight, group, eps, out);
}

void GgmlCpuBackend::matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) {
  std::array<WeightMatrix, kMostStackedParts> parts;
  ggml::matmul(pool(), weight_parts(w, parts), static_cast<const float*>(x.data),
               static_cast<int64_t>(x.row_stride / sizeof(float)), x.rows, static_cast<float*>(out.data),
               static_cast<int64_t>(out.row_stride / sizeof(float)), bias, buffers_);
}

void GgmlCpuBackend::rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) {
  ggml::rope(pool(), x, positions, params);
}

void GgmlCpuBackend::attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                               const TensorRef& out) {
  ggml::attention(build_, pool(), q, kv, positions, scale, kv.scale_queries, out);
}

void GgmlCpuBackend::glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) {
  ggml::glu(build_, pool(), gate, up, act, out);
}

}  // namespace cellm::cpu::ggml
