#include "core/tanh_glibc.h"

#include <cmath>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/fdlibm_expm1f.h"

namespace cellm {
namespace {

#if defined(__x86_64__)
#define CELLM_AVX512 __attribute__((target("avx512f")))

// Every lane. (The unmasked forms of a few conversions and shifts start from an undefined
// vector, which GCC 12 reports as maybe uninitialized.)
constexpr __mmask16 kAll = 0xffff;

// The operations below are glibc's, one IEEE operation each; this file is compiled with
// -ffp-contract=off so that no multiply and add are fused into one rounding.
CELLM_AVX512 inline __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
CELLM_AVX512 inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
CELLM_AVX512 inline __m512 sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
CELLM_AVX512 inline __m512 set(float f) { return _mm512_set1_ps(f); }
CELLM_AVX512 inline __m512 bits(__m512i i) { return _mm512_castsi512_ps(i); }

// fdlibm's expm1f for sixteen finite arguments with 2^-54 < |x| < 44 (what tanhf passes it).
CELLM_AVX512 __m512 expm1_16(__m512 x) {
  namespace fd = fdlibm::expm1f;
  const __m512 kLn2Hi = set(fd::kLn2Hi), kLn2Lo = set(fd::kLn2Lo), kInvLn2 = set(fd::kInvLn2);
  const __m512 kQ1 = set(fd::kQ1), kQ2 = set(fd::kQ2), kQ3 = set(fd::kQ3), kQ4 = set(fd::kQ4), kQ5 = set(fd::kQ5);
  const __m512i raw = _mm512_castps_si512(x);
  const __m512i hx = _mm512_and_si512(raw, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 negative = _mm512_cmplt_epi32_mask(raw, _mm512_setzero_si512());
  const __mmask16 reduced = _mm512_cmpgt_epi32_mask(hx, _mm512_set1_epi32(0x3eb17218));  // |x| > ln2 / 2
  const __mmask16 tiny = ~reduced & _mm512_cmplt_epi32_mask(hx, _mm512_set1_epi32(0x33000000));  // |x| < 2^-25
  const __mmask16 near = reduced & _mm512_cmplt_epi32_mask(hx, _mm512_set1_epi32(0x3F851592));  // |x| < 1.5 ln2

  // x = k ln2 + (hi - lo): k = +-1 near ln2, else x / ln2 rounded half away from zero.
  const __m512 half = _mm512_mask_blend_ps(negative, set(0.5f), set(-0.5f));
  __m512i k = _mm512_maskz_cvttps_epi32(kAll, add(mul(kInvLn2, x), half));
  k = _mm512_mask_blend_epi32(near, k, _mm512_mask_blend_epi32(negative, _mm512_set1_epi32(1), _mm512_set1_epi32(-1)));
  k = _mm512_mask_blend_epi32(reduced, _mm512_setzero_si512(), k);
  const __m512 t_k = _mm512_maskz_cvtepi32_ps(kAll, k);
  __m512 hi = sub(x, mul(t_k, kLn2Hi));
  __m512 lo = mul(t_k, kLn2Lo);
  hi = _mm512_mask_blend_ps(near, hi, _mm512_mask_blend_ps(negative, sub(x, kLn2Hi), add(x, kLn2Hi)));
  lo = _mm512_mask_blend_ps(near, lo, _mm512_mask_blend_ps(negative, kLn2Lo, set(-fd::kLn2Lo)));
  const __m512 xr = sub(hi, lo);
  const __m512 c_reduced = sub(sub(hi, xr), lo);
  const __m512 xx = _mm512_mask_blend_ps(reduced, x, xr);
  const __m512 c = _mm512_mask_blend_ps(reduced, _mm512_setzero_ps(), c_reduced);

  const __m512 hfx = mul(set(0.5f), xx);
  const __m512 hxs = mul(xx, hfx);
  __m512 r1 = add(kQ4, mul(hxs, kQ5));
  r1 = add(kQ3, mul(hxs, r1));
  r1 = add(kQ2, mul(hxs, r1));
  r1 = add(kQ1, mul(hxs, r1));
  r1 = add(set(1.0f), mul(hxs, r1));
  __m512 t = sub(set(3.0f), mul(r1, hfx));
  __m512 e = mul(hxs, _mm512_div_ps(sub(r1, t), sub(set(6.0f), mul(xx, t))));
  const __m512 result_k0 = sub(xx, sub(mul(xx, e), hxs));

  const __m512 twopk = bits(_mm512_add_epi32(_mm512_set1_epi32(0x3f800000), _mm512_maskz_slli_epi32(kAll, k, 23)));
  e = sub(mul(xx, sub(e, c)), c);
  e = sub(e, hxs);
  const __m512 result_km1 = sub(mul(set(0.5f), sub(xx, e)), set(0.5f));
  const __m512 result_k1_low = mul(set(-2.0f), sub(e, add(xx, set(0.5f))));
  const __m512 result_k1 = add(set(1.0f), mul(set(2.0f), sub(xx, e)));
  const __m512 result_far = sub(mul(sub(set(1.0f), sub(e, xx)), twopk), set(1.0f));
  const __m512 t_small = bits(_mm512_sub_epi32(_mm512_set1_epi32(0x3f800000),
                                               _mm512_maskz_srlv_epi32(kAll, _mm512_set1_epi32(0x1000000), k)));
  const __m512 result_mid = mul(sub(t_small, sub(e, xx)), twopk);
  const __m512 t_large = bits(_mm512_maskz_slli_epi32(kAll, _mm512_sub_epi32(_mm512_set1_epi32(0x7f), k), 23));
  const __m512 result_high = mul(add(sub(xx, add(e, t_large)), set(1.0f)), twopk);

  // The lane's own branch, in glibc's order of tests.
  const __mmask16 k_le_m2 = _mm512_cmple_epi32_mask(k, _mm512_set1_epi32(-2));
  const __mmask16 k_gt_56 = _mm512_cmpgt_epi32_mask(k, _mm512_set1_epi32(56));
  const __mmask16 k_lt_23 = _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(23));
  __m512 y = _mm512_mask_blend_ps(k_lt_23, result_high, result_mid);
  y = _mm512_mask_blend_ps(k_le_m2 | k_gt_56, y, result_far);
  const __mmask16 k1 = _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(1));
  const __mmask16 low = _mm512_cmp_ps_mask(xx, set(-0.25f), _CMP_LT_OQ);
  y = _mm512_mask_blend_ps(k1, y, _mm512_mask_blend_ps(low, result_k1, result_k1_low));
  y = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(-1)), y, result_km1);
  y = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), y, result_k0);
  return _mm512_mask_blend_ps(tiny, y, x);
}

// Sixteen values with 2^-55 <= |x| (finite): glibc's tanhf.
CELLM_AVX512 __m512 tanh_16(__m512 x) {
  const __m512i raw = _mm512_castps_si512(x);
  const __m512i ix = _mm512_and_si512(raw, _mm512_set1_epi32(0x7fffffff));
  const __m512 ax = bits(ix);
  const __mmask16 big = _mm512_cmpge_epi32_mask(ix, _mm512_set1_epi32(0x3f800000));  // |x| >= 1
  const __mmask16 saturated = _mm512_cmpge_epi32_mask(ix, _mm512_set1_epi32(0x41b00000));  // |x| >= 22
  const __m512 t = expm1_16(_mm512_mask_blend_ps(big, mul(set(-2.0f), ax), mul(set(2.0f), ax)));
  const __m512 z_big = sub(set(1.0f), _mm512_div_ps(set(2.0f), add(t, set(2.0f))));
  const __m512 minus_t = bits(_mm512_xor_si512(_mm512_castps_si512(t), _mm512_set1_epi32(int32_t(0x80000000u))));
  const __m512 z_small = _mm512_div_ps(minus_t, add(t, set(2.0f)));
  __m512 z = _mm512_mask_blend_ps(big, z_small, z_big);
  z = _mm512_mask_blend_ps(saturated, z, set(1.0f));
  // The sign of x on |z|.
  return bits(_mm512_or_si512(_mm512_castps_si512(z), _mm512_and_si512(raw, _mm512_set1_epi32(int32_t(0x80000000u)))));
}

CELLM_AVX512 void tanh_in_place_avx512(float* x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i ix = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
    // NaN and infinities, and |x| < 2^-55 (glibc: x * (1 + x)), go to std::tanh.
    const __mmask16 special = _mm512_cmpge_epi32_mask(ix, _mm512_set1_epi32(0x7f800000)) |
                              _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32(0x24000000));
    if (special == 0) {
      _mm512_storeu_ps(x + i, tanh_16(v));
    } else {
      for (size_t j = i; j < i + 16; ++j) x[j] = std::tanh(x[j]);
    }
  }
  for (; i < n; ++i) x[i] = std::tanh(x[i]);
}
#undef CELLM_AVX512
#endif

}  // namespace

void tanh_in_place(float* x, size_t n) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return tanh_in_place_avx512(x, n);
#endif
  for (size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

}  // namespace cellm
