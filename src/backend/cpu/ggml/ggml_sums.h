#pragma once
// The horizontal sums ggml's kernels end with, each in its own association (float addition
// is not associative, so each is spelled out as the instructions compute it).
namespace cellm::cpu::ggml {

// hsum_float_8 (ggml's quant dot products, tinyBLAS on 8 lanes, the AVX2 softmax):
// high half + low half, then (0+2) + (1+3).
inline float hsum8(const float* x) {
  const float r0 = x[4] + x[0], r1 = x[5] + x[1], r2 = x[6] + x[2], r3 = x[7] + x[3];
  return (r0 + r2) + (r1 + r3);
}

// GCC's _mm512_reduce_add_ps (tinyBLAS on 16 lanes, the AVX-512 softmax and f16 dot):
// the two 8-lane halves added, then as hsum8.
inline float reduce16(const float* x) {
  float half[8];
  for (int i = 0; i < 8; ++i) half[i] = x[i + 8] + x[i];
  return hsum8(half);
}

// The end of GGML_F32x8_REDUCE (the AVX2 f16 dot): low half + high half, then two hadds:
// (0+1) + (2+3).
inline float hadd8(const float* x) {
  const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
  return (t0 + t1) + (t2 + t3);
}

}  // namespace cellm::cpu::ggml
