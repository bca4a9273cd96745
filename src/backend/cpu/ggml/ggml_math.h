#pragma once
// ggml's element-wise functions, one value at a time: each lane of ggml's vector code
// depends on its own input only, so computing them one by one gives the same bits.
#include <cstdint>

#include "backend/cpu/ggml/ggml_build.h"

namespace cellm::cpu::ggml {

// ggml_v_expf of the build (vec.h: a polynomial after Arm's optimized routines; the AVX-512
// build scales by 2^n with scalef, the AVX2 build by building 2^n in the exponent bits).
float vector_expf(Build build, float x);
// ggml_v_silu: x / (1 + e^-x) with vector_expf.
float vector_silu(Build build, float x);
// ggml_silu_f32, for the elements after the last whole vector: x / (1 + expf(-x)) with libm.
float scalar_silu(float x);

// ggml_table_gelu_f16: the tanh-approximated GELU of every fp16 value, rounded to fp16, as
// ggml_cpu_init() fills it (ggml_vec_geglu_f32 looks the gate up there).
const uint16_t* gelu_table();
// ggml_vec_geglu_f32 for one element (the table between -10 and 10).
float geglu(float gate, float up);

}  // namespace cellm::cpu::ggml
