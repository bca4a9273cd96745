#pragma once
// fdlibm's expm1f constants (glibc's sysdeps/ieee754/flt-32/s_expm1f.c, under its tanhf), shared
// by the CPU's batched tanh (tanh_glibc.cpp) and the CUDA port (backend/cuda/host_libm.cuh),
// which must both give glibc's bits. Scalar constexpr values, so device code may use them too.
namespace cellm::fdlibm::expm1f {

inline constexpr float kLn2Hi = 6.9313812256e-01f;
inline constexpr float kLn2Lo = 9.0580006145e-06f;
inline constexpr float kInvLn2 = 1.4426950216e+00f;
// The polynomial's coefficients, Q1 to Q5.
inline constexpr float kQ1 = -3.3333335072e-02f;
inline constexpr float kQ2 = 1.5873016091e-03f;
inline constexpr float kQ3 = -7.9365076090e-05f;
inline constexpr float kQ4 = 4.0082177293e-06f;
inline constexpr float kQ5 = -2.0109921195e-07f;

}  // namespace cellm::fdlibm::expm1f
