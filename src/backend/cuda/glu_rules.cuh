#pragma once
// The gated activations on the GPU, shared by the element-wise GLU (elementwise.cu) and the GLU
// that quantizes its output for the next product (glu_quantize.cu).
#include "backend/cuda/host_libm.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/ops.h"

namespace cellm::cuda::glu {

// The activations take the CPU's float steps one by one (explicit rounding: no contraction into
// fused multiply-adds), with glibc's expf and tanhf (host_libm.cuh), so they are the CPU's bit
// for bit where the host libm is glibc. A differing last bit would make the next activation
// quantization pick a different code now and then, and from there the GPU's tokens drift from
// the CPU's.
__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, libm::expf_glibc(-x))); }

__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  // 0.5f * x * (1.0f + tanh(kSqrt2OverPi * x * (1.0f + kCoef * x * x))), left to right.
  const float inner = __fmul_rn(__fmul_rn(kSqrt2OverPi, x), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(kCoef, x), x)));
  const float t = libm::tanhf_glibc(inner);
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
}

// The table kAct's math reads (glibc expf's, for SiLU), asked into L1 before the kernel's
// wait_for_inputs(): otherwise its first use waits a trip to L2 inside the dependent chain.
template <backend::GluActivation kAct>
__device__ __forceinline__ void prefetch_tables() {
  if constexpr (kAct == backend::GluActivation::Silu)
    prefetch_read_only(libm::exp2f_table_data(), libm::kExp2fTableBytes);
}

// act(gate) * up, rounded once.
template <backend::GluActivation kAct>
__device__ __forceinline__ float gated(float gate, float up) {
  const float a = kAct == backend::GluActivation::Silu ? silu(gate) : gelu_tanh(gate);
  return __fmul_rn(a, up);
}

}  // namespace cellm::cuda::glu
