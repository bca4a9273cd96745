#pragma once
// std::tanh(float) for many values at once, bit for bit what glibc returns: GeGLU's tanh is part
// of the CPU kernels' defined arithmetic (and the CUDA backend reproduces it, host_libm.cuh), so
// a faster tanh must not change one bit. glibc's tanhf is fdlibm's (sysdeps/ieee754/flt-32/
// s_tanhf.c over s_expm1f.c), all in float: tanh(x) = 1 - 2 / (expm1(2|x|) + 2) for |x| >= 1,
// -expm1(-2|x|) / (expm1(-2|x|) + 2) below, +-1 from 22 on. With AVX-512 sixteen values go
// through it at a time, every branch of expm1f computed and the lane's own picked; NaN,
// infinities and |x| < 2^-55 (zero included), and machines without AVX-512, take std::tanh.
#include <cstddef>

namespace cellm {

// x[i] = std::tanh(x[i]) for i in [0, n).
void tanh_in_place(float* x, size_t n);

}  // namespace cellm
