#pragma once
// The rotary embedding's arithmetic on the device, for the kernels that rotate (rope.cu, and
// attention.cu where a decode step's attention rotates its own query and new key): the angle
// of a pair and the rotation, with the CPU kernel's bits (rope.cu says how).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/rope_table.h"

namespace cellm::cuda::rope {

// (cos, sin) of pair i at position pos: the table's entry where it covers pos, else the angle
// pos * freq_scale * theta_scale^i built by repeated multiplication in float with cos/sin
// evaluated in double and rounded once.
__device__ __forceinline__ float2 angle_of(const Angles& a, int32_t pos, int i) {
  if (a.table != nullptr && pos >= 0 && pos < kRopeTablePositions) return a.table[static_cast<size_t>(pos) * a.half + i];
  float theta = __fmul_rn(static_cast<float>(pos), a.freq_scale);
  for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, a.theta_scale);
  return make_float2(static_cast<float>(cos(static_cast<double>(theta))),
                     static_cast<float>(sin(static_cast<double>(theta))));
}

// The columns within a head of pair i: adjacent (interleaved) or half a head apart (NeoX).
__device__ __forceinline__ int first_column(bool interleaved, int i) { return interleaved ? 2 * i : i; }
__device__ __forceinline__ int second_column(bool interleaved, int half, int i) {
  return interleaved ? 2 * i + 1 : i + half;
}

// The pair (x0, x1) rotated by cs, in the CPU's float steps, unfused.
__device__ __forceinline__ float rotated_first(float x0, float x1, float2 cs) {
  return __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
}
__device__ __forceinline__ float rotated_second(float x0, float x1, float2 cs) {
  return __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x));
}

// Column c of a head of head_dim columns, all of which rotate (rope_dim == head_dim): its pair
// and whether it is the pair's first column.
struct PairOf {
  int pair, partner;
  bool first;
};
__device__ __forceinline__ PairOf pair_of(bool interleaved, int half, int c) {
  if (interleaved) return {c / 2, c ^ 1, c % 2 == 0};
  return c < half ? PairOf{c, c + half, true} : PairOf{c - half, c - half, false};
}

}  // namespace cellm::cuda::rope
