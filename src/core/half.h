#pragma once
// Bit-exact conversions between float and the 16-bit formats stored in GGUF files.
// Portable (no F16C needed); kernels use vector instructions where they pay.
#include <cstdint>
#include <cstring>

namespace cellm {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// IEEE half -> float, exact for every input including subnormals, infinities and NaNs.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_to_float(sign);
  // Subnormal half: normalise into a float.
  int e = -1;
  do {
    ++e;
    mantissa <<= 1;
  } while ((mantissa & 0x400u) == 0);
  return bits_to_float(sign | (static_cast<uint32_t>(112 - e) << 23) | ((mantissa & 0x3ffu) << 13));
}

// float -> IEEE half with round-to-nearest-even (what numpy's astype(float16) does).
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    // Shift the implicit-one mantissa right with rounding to nearest even.
    const uint32_t exponent = abs >> 23;
    if (exponent < 102) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t result = ((abs - 0x38000000u) >> 13);
  const uint32_t remainder = abs & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

inline float bf16_to_fp32(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// float -> bfloat16 with round-to-nearest-even; NaNs stay NaN (quiet bit forced).
inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace cellm
