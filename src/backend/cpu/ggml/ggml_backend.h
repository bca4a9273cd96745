#pragma once
// The CPU backend with ggml numerics (ggml_build.h): memory, weights and the KV pool as the
// CPU backend keeps them; the kernels whose order llama.cpp's differs from cellm's
// (RMSNorm, matmul, RoPE, attention, the gated activations) replaced by ggml's. Embedding,
// residual adds, the KV store (f32 -> f16, round to nearest) and row gathers compute the
// same bits in both.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ggml/ggml_build.h"
#include "backend/cpu/ggml/ggml_matmul.h"

namespace cellm::cpu::ggml {

class GgmlCpuBackend final : public CpuBackend {
 public:
  GgmlCpuBackend(int n_threads, Build build);

  std::string description() const override;
  // Refuses at load a quantized matrix whose product has no ggml order here (the embedding
  // table is only looked up, unless it is also the output matrix: then its first product fails).
  TensorRef place_weight(const TensorRef& host_weight, const std::string& name) override;

  void rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) override;
  void matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) override;
  void rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) override;
  void attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                 const TensorRef& out) override;
  void glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) override;

 private:
  Build build_;
  MatmulBuffers buffers_;
};

}  // namespace cellm::cpu::ggml
