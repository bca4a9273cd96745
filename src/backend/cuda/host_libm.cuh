#pragma once
// expf and tanhf as glibc computes them on the host, for device code that must reproduce the
// CPU backend's std::exp(float) / std::tanh(float) bit for bit (GPU and CPU tokens agree only
// if every activation is the same: one differing bit changes, now and then, a code of the next
// activation quantization). CUDA's expf/tanhf are off by up to 2 ulp; even exp and tanh in
// double rounded to float differ from glibc for ~0.06% / ~9% of inputs. Each operation is
// written with explicit rounding (no contraction into fused multiply-adds where glibc has
// none). Checked on the host against glibc 2.36 on 2e7-3e7 random inputs each: no difference.
//  - expf: sysdeps/ieee754/flt-32/e_expf.c (glibc >= 2.27): a table of 2^(i/32) and a cubic
//    in double, rounded to float once (its fused and unfused forms round to the same floats);
//  - tanhf: sysdeps/ieee754/flt-32/s_tanhf.c over s_expm1f.c (fdlibm), all in float.
#include <cstddef>
#include <cstdint>

#include "core/fdlibm_expm1f.h"
#include "core/glibc_exp2f_table.h"

namespace cellm::cuda::libm {

// asuint64(2^(i/32)) - (i << 47): the table of glibc's __exp2f_data. In global memory (read
// through L1): a table local to the function would be rebuilt in local memory at every call.
static __device__ const uint64_t kExp2fTable[32] = CELLM_GLIBC_EXP2F_TABLE;

__device__ __forceinline__ uint64_t exp2f_table(int i) { return __ldg(&kExp2fTable[i]); }
__device__ __forceinline__ const void* exp2f_table_data() { return kExp2fTable; }
inline constexpr size_t kExp2fTableBytes = sizeof(kExp2fTable);

// expf with the table read through `table_at(i)` (entry i of kExp2fTable): a copy in shared
// memory serves a kernel of many calls better than L1, where other loads evict it.
template <class TableAt>
__device__ __forceinline__ float expf_glibc_with(float x, TableAt&& table_at) {
  constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32, kShift = 0x1.8p+52;
  constexpr double kC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, kC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                   kC2 = 0x1.62e42ff0c52d6p-1 / 32;
  if (x != x) return x + x;                   // NaN
  if (x < -0x1.9fe368p6f) return 0.0f;        // below log(2^-150): underflows to 0
  if (x > 0x1.62e42ep6f) return __int_as_float(0x7f800000);  // above log(2^128): +inf
  const double xd = x;
  const double z = __dmul_rn(kInvLn2N, xd);
  double kd = __dadd_rn(z, kShift);  // rounds z to an integer (ties to even)
  const auto ki = static_cast<uint64_t>(__double_as_longlong(kd));
  kd = __dsub_rn(kd, kShift);
  const double r = __dsub_rn(z, kd);
  const double s = __longlong_as_double(static_cast<long long>(table_at(static_cast<int>(ki % 32)) + (ki << 47)));
  const double p = __fma_rn(kC0, r, kC1);
  const double r2 = __dmul_rn(r, r);
  double y = __fma_rn(kC2, r, 1.0);
  y = __fma_rn(p, r2, y);
  return __double2float_rn(__dmul_rn(y, s));
}

__device__ __forceinline__ float expf_glibc(float x) {
  return expf_glibc_with(x, [](int i) { return exp2f_table(i); });
}

// With a copy of kExp2fTable (in shared memory).
__device__ __forceinline__ float expf_glibc(float x, const uint64_t* table) {
  return expf_glibc_with(x, [table](int i) { return table[i]; });
}

// fdlibm's expm1f for the arguments tanhf gives it (|x| < 44, finite).
__device__ __forceinline__ float expm1f_fdlibm(float x) {
  using namespace fdlibm::expm1f;
  const uint32_t bits = __float_as_uint(x);
  const bool negative = (bits >> 31) != 0;
  const uint32_t hx = bits & 0x7fffffffu;
  if (hx >= 0x4195b844u && negative) return -1.0f;  // x < -27 ln2 (glibc: tiny - 1)
  float c = 0.0f;
  int k = 0;
  if (hx > 0x3eb17218u) {  // |x| > ln2 / 2: x = k ln2 + (hi - lo)
    float hi, lo;
    if (hx < 0x3F851592u) {
      hi = negative ? __fadd_rn(x, kLn2Hi) : __fsub_rn(x, kLn2Hi);
      lo = negative ? -kLn2Lo : kLn2Lo;
      k = negative ? -1 : 1;
    } else {
      k = __float2int_rz(__fadd_rn(__fmul_rn(kInvLn2, x), negative ? -0.5f : 0.5f));
      const auto t = static_cast<float>(k);
      hi = __fsub_rn(x, __fmul_rn(t, kLn2Hi));
      lo = __fmul_rn(t, kLn2Lo);
    }
    x = __fsub_rn(hi, lo);
    c = __fsub_rn(__fsub_rn(hi, x), lo);
  } else if (hx < 0x33000000u) {
    return x;  // |x| < 2^-25
  }
  const float hfx = __fmul_rn(0.5f, x);
  const float hxs = __fmul_rn(x, hfx);
  float r1 = __fadd_rn(kQ4, __fmul_rn(hxs, kQ5));
  r1 = __fadd_rn(kQ3, __fmul_rn(hxs, r1));
  r1 = __fadd_rn(kQ2, __fmul_rn(hxs, r1));
  r1 = __fadd_rn(kQ1, __fmul_rn(hxs, r1));
  r1 = __fadd_rn(1.0f, __fmul_rn(hxs, r1));
  float t = __fsub_rn(3.0f, __fmul_rn(r1, hfx));
  float e = __fmul_rn(hxs, __fdiv_rn(__fsub_rn(r1, t), __fsub_rn(6.0f, __fmul_rn(x, t))));
  if (k == 0) return __fsub_rn(x, __fsub_rn(__fmul_rn(x, e), hxs));
  const float twopk = __uint_as_float(0x3f800000u + (static_cast<uint32_t>(k) << 23));
  e = __fsub_rn(__fmul_rn(x, __fsub_rn(e, c)), c);
  e = __fsub_rn(e, hxs);
  if (k == -1) return __fsub_rn(__fmul_rn(0.5f, __fsub_rn(x, e)), 0.5f);
  if (k == 1) {
    if (x < -0.25f) return __fmul_rn(-2.0f, __fsub_rn(e, __fadd_rn(x, 0.5f)));
    return __fadd_rn(1.0f, __fmul_rn(2.0f, __fsub_rn(x, e)));
  }
  float y;
  if (k <= -2 || k > 56) {
    y = __fsub_rn(1.0f, __fsub_rn(e, x));
    y = __fmul_rn(y, twopk);
    return __fsub_rn(y, 1.0f);
  }
  if (k < 23) {
    t = __uint_as_float(0x3f800000u - (0x1000000u >> k));
    y = __fsub_rn(t, __fsub_rn(e, x));
  } else {
    t = __uint_as_float(static_cast<uint32_t>(0x7f - k) << 23);
    y = __fsub_rn(x, __fadd_rn(e, t));
    y = __fadd_rn(y, 1.0f);
  }
  return __fmul_rn(y, twopk);
}

__device__ __forceinline__ float tanhf_glibc(float x) {
  const uint32_t bits = __float_as_uint(x);
  const uint32_t ix = bits & 0x7fffffffu;
  if (ix >= 0x7f800000u) return ix > 0x7f800000u ? x + x : ((bits >> 31) ? -1.0f : 1.0f);  // NaN, +-inf
  float z;
  if (ix < 0x41b00000u) {  // |x| < 22
    if (ix == 0) return x;
    if (ix < 0x24000000u) return __fmul_rn(x, __fadd_rn(1.0f, x));  // |x| < 2^-55
    if (ix >= 0x3f800000u) {  // |x| >= 1
      const float t = expm1f_fdlibm(__fmul_rn(2.0f, fabsf(x)));
      z = __fsub_rn(1.0f, __fdiv_rn(2.0f, __fadd_rn(t, 2.0f)));
    } else {
      const float t = expm1f_fdlibm(__fmul_rn(-2.0f, fabsf(x)));
      z = __fdiv_rn(-t, __fadd_rn(t, 2.0f));
    }
  } else {
    z = 1.0f;  // 1 - 1e-30 rounded
  }
  return (bits >> 31) ? -z : z;
}

}  // namespace cellm::cuda::libm
