#include "backend/cpu/ggml/ggml_math.h"

#include <cmath>
#include <vector>

#include "core/half.h"

namespace cellm::cpu::ggml {
namespace {

// The polynomial both builds share, as the reduced argument b of e^x = 2^n * e^b.
struct Reduced {
  float z, n, b, u;
};

Reduced reduce(float x) {
  const float r = 0x1.8p23f;
  Reduced v;
  v.z = std::fma(x, 0x1.715476p+0f, r);
  v.n = v.z - r;
  v.b = std::fma(-v.n, 0x1.7f7d1cp-20f, std::fma(-v.n, 0x1.62e4p-1f, x));
  v.u = v.b * v.b;
  return v;
}

// The part of the polynomial of degree >= 2, shared by both builds.
float high_terms(const Reduced& v) {
  return std::fma(std::fma(0x1.0e4020p-7f, v.b, 0x1.573e2ep-5f), v.u, std::fma(0x1.555e66p-3f, v.b, 0x1.fffdb6p-2f));
}

float expf_avx512(float x) {
  const Reduced v = reduce(x);
  const float j = std::fma(high_terms(v), v.u, std::fma(0x1.ffffecp-1f, v.b, 1.0f));
  if (std::fabs(v.n) > 192) return v.n <= 0 ? 0.0f : INFINITY;
  // _mm512_scalef_ps(j, n): j * 2^n, rounded once (ldexp is exact or correctly rounded).
  return std::ldexp(j, static_cast<int>(v.n));
}

float expf_avx2(float x) {
  const Reduced v = reduce(x);
  const uint32_t e = float_to_bits(v.z) << 23;
  const float k = bits_to_float(e + float_to_bits(1.0f));
  const float j = std::fma(high_terms(v), v.u, 0x1.ffffecp-1f * v.b);
  const float abs_n = std::fabs(v.n);
  if (!(abs_n > 126)) return std::fma(k, j, k);
  const uint32_t g = v.n <= 0 ? 0x82000000u : 0u;
  const float s1 = bits_to_float(g + 0x7f000000u);
  const float s2 = bits_to_float(e - g);
  if (abs_n > 192) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

std::vector<uint16_t> make_gelu_table() {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  std::vector<uint16_t> table(1 << 16);
  for (uint32_t h = 0; h < table.size(); ++h) {
    const float x = fp16_to_fp32(static_cast<uint16_t>(h));
    // As GCC compiles ggml_gelu_f32: 1 + a*x*x contracted into one fused multiply-add.
    const float inner = std::fma(kCoefA * x, x, 1.0f);
    const float t = std::tanh(kSqrt2OverPi * x * inner);
    table[h] = fp32_to_fp16(0.5f * x * (1.0f + t));
  }
  return table;
}

}  // namespace

float vector_expf(Build build, float x) { return build == Build::Avx512 ? expf_avx512(x) : expf_avx2(x); }

float vector_silu(Build build, float x) { return x / (1.0f + vector_expf(build, 0.0f - x)); }

float scalar_silu(float x) { return x / (1.0f + std::exp(-x)); }

const uint16_t* gelu_table() {
  static const std::vector<uint16_t> table = make_gelu_table();
  return table.data();
}

float geglu(float gate, float up) {
  if (gate <= -10.0f) return 0.0f;
  if (gate >= 10.0f) return gate * up;
  return fp16_to_fp32(gelu_table()[fp32_to_fp16(gate)]) * up;
}

}  // namespace cellm::cpu::ggml
