#pragma once
// ggml's row operations: RMSNorm (ggml_rms_norm then ggml_mul by the weight), RoPE
// (ggml_rope_ext without scaling extensions) and the gated activations of the FFN.
#include "backend/cpu/ggml/ggml_build.h"
#include "backend/ops.h"
#include "core/thread_pool.h"

namespace cellm::cpu::ggml {

// Sum of squares in double, element by element; x * (1 / sqrtf(mean + eps)), then * weight.
void rms_norm(ThreadPool& pool, const backend::TensorRef& x, const float* weight, int32_t group, float eps,
              const backend::TensorRef& out);
// The angle p * base^(-2i/n) built by repeated multiplication (ggml_rope_cache_init), cosf and
// sinf of it, and each pair (x0, x1) rotated with x0's product fused, as GCC contracts ops.cpp:
// x0' = fma(x0, cos, -(x1 * sin)), x1' = fma(x0, sin, x1 * cos).
void rope(ThreadPool& pool, const backend::TensorRef& x, const int32_t* positions, const backend::RopeParams& params);
// SwiGLU with the build's vector SiLU over whole vectors and libm's expf after them; GeGLU
// through ggml's fp16 GELU table.
void glu(Build build, ThreadPool& pool, const backend::TensorRef& gate, const backend::TensorRef& up,
         backend::GluActivation act, const backend::TensorRef& out);

}  // namespace cellm::cpu::ggml
