#pragma once
// One activation block quantized on the GPU, bit for bit what backend/cpu/quant_activations.cpp
// produces (llama.cpp's rules): the same float operations with explicit IEEE rounding
// (__fdiv_rn, __fmul_rn: no fused or approximate arithmetic), round-half-to-even codes, fp16
// conversions with round-to-nearest-even. Maxima are exact in any order; integer sums too.
// Shared by the standalone kernels (quantize_activations.cu), the producers that quantize their
// own output (rms_norm_quantize.cu, glu_quantize.cu) and the one-token GEMV, which quantizes its
// row itself (gemv_one_token.cu).
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/matmul_kernels.h"

namespace cellm::cuda::quantize {

__device__ __forceinline__ float fp16_round(float v) { return __half2float(__float2half_rn(v)); }

__device__ __forceinline__ uint32_t pack_codes(int a, int b, int c, int d) {
  return (static_cast<uint32_t>(a) & 0xffu) | ((static_cast<uint32_t>(b) & 0xffu) << 8) |
         ((static_cast<uint32_t>(c) & 0xffu) << 16) | ((static_cast<uint32_t>(d) & 0xffu) << 24);
}

// Q8_0 / Q8_1 (32 values), eight consecutive lanes per block, four values v each (lane part
// p = lane % 8 holds values 4p..4p+3): d = fp16(amax / 127), codes = rint(x * (127 / amax)),
// and for Q8_1 s = fp16((amax / 127) * sum(codes)). Every lane of the warp must call it.
struct Q8Block32 {
  uint32_t codes;  // this lane's four codes
  float d;         // the block's scale
  float s;         // Q8_1: the block's sum term
};
__device__ __forceinline__ Q8Block32 quantize_q8_32(float4 v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d_exact = __fdiv_rn(amax, 127.0f);
  const float inverse = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  const int c0 = __float2int_rn(__fmul_rn(v.x, inverse)), c1 = __float2int_rn(__fmul_rn(v.y, inverse));
  const int c2 = __float2int_rn(__fmul_rn(v.z, inverse)), c3 = __float2int_rn(__fmul_rn(v.w, inverse));
  int sum = c0 + c1 + c2 + c3;
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  return {pack_codes(c0, c1, c2, c3), fp16_round(d_exact), fp16_round(__fmul_rn(d_exact, static_cast<float>(sum)))};
}

// Q8_K (256 values), one warp per block, eight values per lane (lane l: values 8l..8l+7): the
// first value of largest magnitude m sets scale = -127 / m, codes = min(127, rint(scale * x)),
// d = 1 / scale (0 for an all-zero block, whose codes are 0), and the sum of every 16 codes
// (lane l's eight codes plus its neighbour's: the even lane holds group l / 2's sum).
struct Q8KBlock {
  uint2 codes;        // this lane's eight codes
  int pair_sum;       // even lanes: the sum of group lane / 2
  float d;
};
__device__ __forceinline__ Q8KBlock quantize_q8_k(const float (&v)[8], int lane) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  // The first element of that magnitude gives the sign, as the CPU's sequential scan finds it.
  int first = 256;
  float mine = 0.0f;
#pragma unroll
  for (int i = 7; i >= 0; --i) {
    if (fabsf(v[i]) == amax) {
      first = 8 * lane + i;
      mine = v[i];
    }
  }
  int first_all = first;
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) first_all = min(first_all, __shfl_xor_sync(0xffffffffu, first_all, m));
  const float signed_max = __shfl_sync(0xffffffffu, mine, first_all / 8 % 32);
  if (amax == 0.0f) return {make_uint2(0, 0), 0, 0.0f};
  const float inverse = __fdiv_rn(-127.0f, signed_max);
  int c[8];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = static_cast<int>(fminf(127.0f, rintf(__fmul_rn(inverse, v[i]))));
    sum += c[i];
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  return {make_uint2(pack_codes(c[0], c[1], c[2], c[3]), pack_codes(c[4], c[5], c[6], c[7])), sum,
          __fdiv_rn(1.0f, inverse)};
}

// A quantized block into its place in q (matmul_kernels.h's layout): row t, block b of the
// row's `blocks`, from the lanes that computed it.
template <bool kWithSums>
__device__ __forceinline__ void store_q8_32(const Q8Block32& r, const QuantizedActivations& q, int64_t t, int b,
                                            int blocks, int part) {
  *reinterpret_cast<uint32_t*>(q.codes + t * q.row_stride + 32 * b + 4 * part) = r.codes;
  if (part == 0) {
    q.scales[t * blocks + b] = r.d;
    if constexpr (kWithSums) q.sums[t * blocks + b] = r.s;
  }
}
__device__ __forceinline__ void store_q8_k(const Q8KBlock& r, const QuantizedActivations& q, int64_t t, int b,
                                           int blocks, int lane) {
  *reinterpret_cast<uint2*>(q.codes + t * q.row_stride + 256 * b + 8 * lane) = r.codes;
  if (lane % 2 == 0) q.group_sums[t * (int64_t{blocks} * 16) + 16 * b + lane / 2] = static_cast<int16_t>(r.pair_sum);
  if (lane == 0) q.scales[t * blocks + b] = r.d;
}

// A producer's values quantized where they are made, the one loop body of the quantizing
// producers (quantize_activations.cu: the values as they are; rms_norm_quantize.cu: the
// normalized row; glu_quantize.cu: act(gate) * up): `values(at)` gives the four values at
// element `at` of row t; `y`, the producer's own float output row, receives them too unless
// null. Q8_K: block b by one warp, eight values per lane.
template <class Values>
__device__ __forceinline__ void produce_q8_k(const Values& values, float* y, const QuantizedActivations& q, int64_t t,
                                             int b, int blocks, int lane) {
  const int at = 256 * b + 8 * lane;
  const float4 lo = values(at), hi = values(at + 4);
  if (y != nullptr) {
    *reinterpret_cast<float4*>(y + at) = lo;
    *reinterpret_cast<float4*>(y + at + 4) = hi;
  }
  const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  store_q8_k(quantize_q8_k(v, lane), q, t, b, blocks, lane);
}
// The 32-value formats: block b by eight lanes, four values each. Every lane of the warp must
// call it (the block's reductions shuffle); lanes with `store` false compute, on a block the
// caller picked, and store nothing.
template <bool kWithSums, class Values>
__device__ __forceinline__ void produce_q8_32(const Values& values, float* y, bool store, const QuantizedActivations& q,
                                              int64_t t, int b, int blocks, int part) {
  const int at = 32 * b + 4 * part;
  const float4 v = values(at);
  const Q8Block32 r = quantize_q8_32(v);
  if (!store) return;
  if (y != nullptr) *reinterpret_cast<float4*>(y + at) = v;
  store_q8_32<kWithSums>(r, q, t, b, blocks, part);
}

}  // namespace cellm::cuda::quantize
