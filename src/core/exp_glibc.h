#pragma once
// std::exp(float) for many values at once, bit for bit what glibc (>= 2.27) returns: the CPU
// kernels are defined by glibc's expf (and the CUDA backend reproduces it), and the samplers'
// draws by std::exp, so a faster exp must not change one bit. glibc's algorithm (sysdeps/ieee754/flt-32/e_expf.c): x / ln2 * 32
// rounded to an integer k, a table of 2^(i/32), a cubic in the remainder, all in double, one
// rounding to float. With AVX2 four values go through it at a time; elsewhere, std::exp.
#include <cstddef>

namespace cellm {

// x[i] = std::exp(x[i]) for i in [0, n).
void exp_in_place(float* x, size_t n);

}  // namespace cellm
