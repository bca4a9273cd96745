#pragma once
// The integer GEMV's view of a quantized weight unit (weight_units.cuh has the layouts and the
// lane assignment): lane q's eight quants as int8 bytes in two words (elements 0-3 and 4-7 of
// the lane, as unit_offset orders them), plus the unit's scale and offset, so that
//     weight i = scale * byte i + offset.
// Symmetric formats subtract their zero point (Q4_0's 8, Q5_0's 16, Q6_K's 32) byte-wise and
// have no offset (kHasOffset false); Q4_1, Q5_1, Q4_K and Q5_K keep one offset per unit. The
// bytes meet int8 activations in __dp4a, four multiply-adds per instruction.
#include "backend/cuda/weight_units.cuh"

namespace cellm::cuda {

// Four 1-bit values (bits 0..3 of x) moved to bit 4 of each byte.
__device__ __forceinline__ uint32_t spread_fifth_bits(uint32_t x) { return ((x * 0x00204081u) & 0x01010101u) << 4; }

template <class Unit>
struct QuantBytes;  // defined for the quantized formats only

template <>
struct QuantBytes<UnitQ8_0> {
  static constexpr bool kHasOffset = false;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ8_0);
    const uint8_t* qs = b + offsetof(gguf::BlockQ8_0, qs) + 8 * q;
    lo = units::u32_align2(qs);
    hi = units::u32_align2(qs + 4);
    scale = units::f16_at(b);
    offset = 0.0f;
  }
};

template <>
struct QuantBytes<UnitQ4_0> {
  static constexpr bool kHasOffset = false;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ4_0);
    const uint32_t qs = units::u32_align2(b + offsetof(gguf::BlockQ4_0, qs) + 4 * q);
    lo = __vsub4(qs & 0x0f0f0f0fu, 0x08080808u);
    hi = __vsub4((qs >> 4) & 0x0f0f0f0fu, 0x08080808u);
    scale = units::f16_at(b);
    offset = 0.0f;
  }
};

template <>
struct QuantBytes<UnitQ4_1> {
  static constexpr bool kHasOffset = true;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ4_1);
    const uint32_t qs = units::u32_align4(b + offsetof(gguf::BlockQ4_1, qs) + 4 * q);
    lo = qs & 0x0f0f0f0fu;
    hi = (qs >> 4) & 0x0f0f0f0fu;
    scale = units::f16_at(b);
    offset = units::f16_at(b + offsetof(gguf::BlockQ4_1, m));
  }
};

// Low and high nibbles of a Q5 lane with their fifth bits.
__device__ __forceinline__ void q5_words(uint32_t qs, uint32_t qh, int q, uint32_t& lo, uint32_t& hi) {
  lo = (qs & 0x0f0f0f0fu) | spread_fifth_bits((qh >> (4 * q)) & 0xfu);
  hi = ((qs >> 4) & 0x0f0f0f0fu) | spread_fifth_bits((qh >> (16 + 4 * q)) & 0xfu);
}

template <>
struct QuantBytes<UnitQ5_0> {
  static constexpr bool kHasOffset = false;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ5_0);
    q5_words(units::u32_align2(b + offsetof(gguf::BlockQ5_0, qs) + 4 * q),
             units::u32_align2(b + offsetof(gguf::BlockQ5_0, qh)), q, lo, hi);
    lo = __vsub4(lo, 0x10101010u);
    hi = __vsub4(hi, 0x10101010u);
    scale = units::f16_at(b);
    offset = 0.0f;
  }
};

template <>
struct QuantBytes<UnitQ5_1> {
  static constexpr bool kHasOffset = true;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ5_1);
    q5_words(units::u32_align4(b + offsetof(gguf::BlockQ5_1, qs) + 4 * q),
             units::u32_align4(b + offsetof(gguf::BlockQ5_1, qh)), q, lo, hi);
    scale = units::f16_at(b);
    offset = units::f16_at(b + offsetof(gguf::BlockQ5_1, m));
  }
};

template <bool kFifthBit>
__device__ __forceinline__ void k_asymmetric_bytes(const uint8_t* b, int s, int q, uint32_t& lo, uint32_t& hi,
                                                   float& scale, float& offset) {
  using Block = std::conditional_t<kFifthBit, gguf::BlockQ5_K, gguf::BlockQ4_K>;
  int sc, mn;
  units::k_scale_min(b + offsetof(Block, scales), s, sc, mn);
  const uint2 qs = units::u64_align8(b + offsetof(Block, qs) + 32 * (s / 2) + 8 * q);
  const int shift = 4 * (s % 2);
  lo = (qs.x >> shift) & 0x0f0f0f0fu;
  hi = (qs.y >> shift) & 0x0f0f0f0fu;
  if constexpr (kFifthBit) {
    const uint2 qh = units::u64_align8(b + offsetof(gguf::BlockQ5_K, qh) + 8 * q);
    lo |= ((qh.x >> s) & 0x01010101u) << 4;
    hi |= ((qh.y >> s) & 0x01010101u) << 4;
  }
  scale = units::f16_at(b + offsetof(Block, d)) * static_cast<float>(sc);
  offset = -(units::f16_at(b + offsetof(Block, dmin)) * static_cast<float>(mn));
}

template <>
struct QuantBytes<UnitQ4_K> {
  static constexpr bool kHasOffset = true;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    k_asymmetric_bytes<false>(row + static_cast<size_t>(u / 8) * sizeof(gguf::BlockQ4_K), u % 8, q, lo, hi, scale,
                              offset);
  }
};

template <>
struct QuantBytes<UnitQ5_K> {
  static constexpr bool kHasOffset = true;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    k_asymmetric_bytes<true>(row + static_cast<size_t>(u / 8) * sizeof(gguf::BlockQ5_K), u % 8, q, lo, hi, scale,
                             offset);
  }
};

template <>
struct QuantBytes<UnitQ6_K> {
  static constexpr bool kHasOffset = false;
  __device__ static void decode(const uint8_t* row, int u, int q, uint32_t& lo, uint32_t& hi, float& scale,
                                float& offset) {
    const uint8_t* b = row + static_cast<size_t>(u / 8) * sizeof(gguf::BlockQ6_K);
    const int s = u % 8;
    const int half = s / 4, k = s % 4;
    const uint8_t* ql = b + offsetof(gguf::BlockQ6_K, ql) + 64 * half + 32 * (k & 1) + 8 * q;
    const uint8_t* qh = b + offsetof(gguf::BlockQ6_K, qh) + 32 * half + 8 * q;
    const int low_shift = 4 * (k / 2), high_shift = 2 * k;
    lo = __vsub4(((units::u32_align2(ql) >> low_shift) & 0x0f0f0f0fu) |
                     (((units::u32_align2(qh) >> high_shift) & 0x03030303u) << 4),
                 0x20202020u);
    hi = __vsub4(((units::u32_align2(ql + 4) >> low_shift) & 0x0f0f0f0fu) |
                     (((units::u32_align2(qh + 4) >> high_shift) & 0x03030303u) << 4),
                 0x20202020u);
    const auto sc = static_cast<int8_t>(b[offsetof(gguf::BlockQ6_K, scales) + 8 * half + 2 * k + q / 2]);
    scale = units::f16_at(b + offsetof(gguf::BlockQ6_K, d)) * static_cast<float>(sc);
    offset = 0.0f;
  }
};

}  // namespace cellm::cuda
