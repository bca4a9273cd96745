#pragma once
// The order of RMSNorm's sum of squares, which every backend computes bit for bit. The squares
// of floats are exact in double, so only the order of the additions matters; this one lets a
// GPU block sum a row in parallel (a sequential sum of a 4096-wide row took ~50 us per row on
// an H200, half of a llama3-8b decode step) while the CPU computes the same bits:
//   partial p (0 <= p < kRmsNormPartials) = sum of x_i^2 over i = p, p + kRmsNormPartials, ...
//     in double, in element order, from +0;
//   each run of 32 partials (p = 32w .. 32w + 31) is halved in place: for s = 16, 8, 4, 2, 1,
//     partial[32w + l] += partial[32w + l + s] for l < s (a warp's xor-shuffle reduction);
//   the kRmsNormPartials / 32 run sums r_w = partial[32w] are halved the same way
//     (s = 4, 2, 1); r_0 is the sum.
// Then mean = float(sum / n), inv = 1 / sqrt(mean + eps) in float, y_i = (x_i * inv) * w_i.
namespace cellm::backend {

inline constexpr int kRmsNormPartials = 256;

}  // namespace cellm::backend
