#include "core/exp_glibc.h"

#include <cmath>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/glibc_exp2f_table.h"

namespace cellm {
namespace {

#if defined(__x86_64__)
// asuint64(2^(i/32)) - (i << 47): glibc's __exp2f_data table.
alignas(64) constexpr uint64_t kTable[32] = CELLM_GLIBC_EXP2F_TABLE;

// Four values on glibc's main path; the caller keeps NaN, overflow and underflow for std::exp.
__attribute__((target("avx2,fma"))) __m128 exp4(__m128 x) {
  const __m256d kInvLn2N = _mm256_set1_pd(0x1.71547652b82fep+0 * 32), kShift = _mm256_set1_pd(0x1.8p+52);
  const __m256d kC0 = _mm256_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32);
  const __m256d kC1 = _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32);
  const __m256d kC2 = _mm256_set1_pd(0x1.62e42ff0c52d6p-1 / 32);
  const __m256d z = _mm256_mul_pd(kInvLn2N, _mm256_cvtps_pd(x));
  __m256d kd = _mm256_add_pd(z, kShift);  // z rounded to an integer, ties to even, in the low bits
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, kShift);
  const __m256d r = _mm256_sub_pd(z, kd);
  const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), index, 8);
  const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
  const __m256d p = _mm256_fmadd_pd(kC0, r, kC1);
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(kC2, r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(p, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

__attribute__((target("avx2,fma"))) void exp_in_place_avx2(float* x, size_t n) {
  // glibc's main path covers log(2^-150) < x <= log(2^128); NaN fails both tests.
  const __m128 low = _mm_set1_ps(-0x1.9fe368p6f), high = _mm_set1_ps(0x1.62e42ep6f);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    const __m128 inside = _mm_and_ps(_mm_cmp_ps(v, low, _CMP_GE_OQ), _mm_cmp_ps(v, high, _CMP_LE_OQ));
    if (_mm_movemask_ps(inside) == 0xf) {
      _mm_storeu_ps(x + i, exp4(v));
    } else {
      for (size_t j = i; j < i + 4; ++j) x[j] = std::exp(x[j]);
    }
  }
  for (; i < n; ++i) x[i] = std::exp(x[i]);
}
#endif

}  // namespace

void exp_in_place(float* x, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return exp_in_place_avx2(x, n);
#endif
  for (size_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

}  // namespace cellm
