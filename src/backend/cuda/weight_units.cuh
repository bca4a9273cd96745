#pragma once
// Decoding GGUF weight rows on the GPU, shared by embed, the GEMV and the dequantize-to-bf16
// kernel. A row is cut into "units" of 32 consecutive elements: a block of the 32-element
// formats, a sub-block of the k-quants (unit u of a row = sub-block u % 8 of super-block u / 8),
// 32 plain values of F32/F16/BF16. Four lanes decode one unit, eight elements each, so a warp
// covers eight units per step and its loads stay within a few neighbouring blocks.
//
// Which eight elements lane q holds follows the storage, so each lane's quants sit in
// consecutive bytes (gguf/quant_blocks.h has the layouts):
//   kSplit formats (Q4_0, Q4_1, Q5_0, Q5_1): elements 4q..4q+3 and 16+4q..16+4q+3, the low and
//     high nibbles of qs[4q..4q+3];
//   the others: elements 8q..8q+7.
//
// Values equal gguf/dequantize.cpp's bit for bit: the same float operations in the same order,
// written with the _rn intrinsics so the compiler cannot fuse a multiply and an add.
//
// Alignment: rows start 16-byte aligned (place_weight pads the row stride), so every load below
// is aligned to its width; blocks of 18, 22, 34 and 210 bytes only guarantee 2 bytes, hence the
// 16-bit loads for those.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/plain_values.cuh"
#include "core/dtype.h"
#include "gguf/quant_blocks.h"

namespace cellm::cuda {

inline constexpr int kUnitElems = 32;
inline constexpr int kLanesPerUnit = 4;
inline constexpr int kLaneElems = 8;

namespace units {

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ uint32_t u32_align2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}
__device__ __forceinline__ uint32_t u32_align4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint2 u64_align8(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
__device__ __forceinline__ uint32_t byte_of(uint32_t word, int i) { return (word >> (8 * i)) & 0xffu; }
__device__ __forceinline__ uint32_t byte_of(uint2 words, int i) { return byte_of(i < 4 ? words.x : words.y, i & 3); }

// The 6-bit scale and min of sub-block s of a Q4_K/Q5_K super-block (gguf/quant_k_scales.h).
__device__ __forceinline__ void k_scale_min(const uint8_t* packed, int s, int& scale, int& min) {
  if (s < 4) {
    scale = packed[s] & 63;
    min = packed[s + 4] & 63;
  } else {
    scale = (packed[s + 4] & 0x0f) | ((packed[s - 4] >> 6) << 4);
    min = (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4);
  }
}

}  // namespace units

// Offset inside its unit of lane q's i-th element.
template <bool kSplit>
__device__ __forceinline__ int unit_offset(int q, int i) {
  if constexpr (kSplit) return i < 4 ? 4 * q + i : 16 + 4 * q + (i - 4);
  return 8 * q + i;
}

struct UnitF32 {
  static constexpr DType kType = DType::F32;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const float4* p = reinterpret_cast<const float4*>(row + 4 * (kUnitElems * u + 8 * q));
    const float4 a = p[0], b = p[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
};

// F16 and BF16: eight 16-bit values in one 16-byte load.
template <DType kT>
struct UnitHalfWidth {
  static constexpr DType kType = kT;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + 2 * (kUnitElems * u + 8 * q));
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 pair = unpack_16x2<kT == DType::BF16>(words[i]);
      w[2 * i] = pair.x;
      w[2 * i + 1] = pair.y;
    }
  }
};
using UnitF16 = UnitHalfWidth<DType::F16>;
using UnitBF16 = UnitHalfWidth<DType::BF16>;

struct UnitQ8_0 {
  static constexpr DType kType = DType::Q8_0;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ8_0);
    const float d = units::f16_at(b);
    const uint8_t* qs = b + offsetof(gguf::BlockQ8_0, qs) + 8 * q;
    const uint32_t lo = units::u32_align2(qs), hi = units::u32_align2(qs + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(units::byte_of(lo, i))), d);
      w[4 + i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(units::byte_of(hi, i))), d);
    }
  }
};

struct UnitQ4_0 {
  static constexpr DType kType = DType::Q4_0;
  static constexpr bool kSplit = true;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ4_0);
    const float d = units::f16_at(b);
    const uint32_t qs = units::u32_align2(b + offsetof(gguf::BlockQ4_0, qs) + 4 * q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int byte = static_cast<int>(units::byte_of(qs, i));
      w[i] = __fmul_rn(d, static_cast<float>((byte & 0x0f) - 8));
      w[4 + i] = __fmul_rn(d, static_cast<float>((byte >> 4) - 8));
    }
  }
};

struct UnitQ4_1 {
  static constexpr DType kType = DType::Q4_1;
  static constexpr bool kSplit = true;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ4_1);
    const float d = units::f16_at(b);
    const float m = units::f16_at(b + offsetof(gguf::BlockQ4_1, m));
    const uint32_t qs = units::u32_align4(b + offsetof(gguf::BlockQ4_1, qs) + 4 * q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = units::byte_of(qs, i);
      w[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(byte & 0x0f)), m);
      w[4 + i] = __fadd_rn(__fmul_rn(d, static_cast<float>(byte >> 4)), m);
    }
  }
};

// The 5-bit quants of a Q5_0/Q5_1 lane: low nibbles from qs, fifth bits from qh.
__device__ __forceinline__ void q5_lane(uint32_t qs, uint32_t qh, int q, int (&v)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t byte = units::byte_of(qs, i);
    v[i] = static_cast<int>((byte & 0x0f) | (((qh >> (4 * q + i)) & 1u) << 4));
    v[4 + i] = static_cast<int>((byte >> 4) | (((qh >> (16 + 4 * q + i)) & 1u) << 4));
  }
}

struct UnitQ5_0 {
  static constexpr DType kType = DType::Q5_0;
  static constexpr bool kSplit = true;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ5_0);
    const float d = units::f16_at(b);
    int v[8];
    q5_lane(units::u32_align2(b + offsetof(gguf::BlockQ5_0, qs) + 4 * q),
            units::u32_align2(b + offsetof(gguf::BlockQ5_0, qh)), q, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __fmul_rn(d, static_cast<float>(v[i] - 16));
  }
};

struct UnitQ5_1 {
  static constexpr DType kType = DType::Q5_1;
  static constexpr bool kSplit = true;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint8_t* b = row + static_cast<size_t>(u) * sizeof(gguf::BlockQ5_1);
    const float d = units::f16_at(b);
    const float m = units::f16_at(b + offsetof(gguf::BlockQ5_1, m));
    int v[8];
    q5_lane(units::u32_align4(b + offsetof(gguf::BlockQ5_1, qs) + 4 * q),
            units::u32_align4(b + offsetof(gguf::BlockQ5_1, qh)), q, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __fadd_rn(__fmul_rn(d, static_cast<float>(v[i])), m);
  }
};

// Q4_K and Q5_K: x = (d * scale) * q - (dmin * min) per sub-block.
template <bool kFifthBit>
__device__ __forceinline__ void decode_k_asymmetric(const uint8_t* b, int s, int q, float (&w)[8]) {
  using Block = std::conditional_t<kFifthBit, gguf::BlockQ5_K, gguf::BlockQ4_K>;
  const float d = units::f16_at(b + offsetof(Block, d));
  const float dmin = units::f16_at(b + offsetof(Block, dmin));
  int sc, mn;
  units::k_scale_min(b + offsetof(Block, scales), s, sc, mn);
  const float scale = __fmul_rn(d, static_cast<float>(sc));
  const float min = __fmul_rn(dmin, static_cast<float>(mn));
  const uint2 qs = units::u64_align8(b + offsetof(Block, qs) + 32 * (s / 2) + 8 * q);
  const int shift = 4 * (s % 2);
  uint2 qh = make_uint2(0, 0);
  if constexpr (kFifthBit) qh = units::u64_align8(b + offsetof(gguf::BlockQ5_K, qh) + 8 * q);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int v = static_cast<int>((units::byte_of(qs, i) >> shift) & 0x0f);
    if constexpr (kFifthBit) v |= static_cast<int>(((units::byte_of(qh, i) >> s) & 1u) << 4);
    w[i] = __fsub_rn(__fmul_rn(scale, static_cast<float>(v)), min);
  }
}

struct UnitQ4_K {
  static constexpr DType kType = DType::Q4_K;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    decode_k_asymmetric<false>(row + static_cast<size_t>(u / 8) * sizeof(gguf::BlockQ4_K), u % 8, q, w);
  }
};

struct UnitQ5_K {
  static constexpr DType kType = DType::Q5_K;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    decode_k_asymmetric<true>(row + static_cast<size_t>(u / 8) * sizeof(gguf::BlockQ5_K), u % 8, q, w);
  }
};

struct UnitQ6_K {
  static constexpr DType kType = DType::Q6_K;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* row, int u, int q, float (&w)[8]) {
    const uint8_t* b = row + static_cast<size_t>(u / 8) * sizeof(gguf::BlockQ6_K);
    const int s = u % 8;
    const int half = s / 4, k = s % 4;
    const uint8_t* ql = b + offsetof(gguf::BlockQ6_K, ql) + 64 * half + 32 * (k & 1) + 8 * q;
    const uint8_t* qh = b + offsetof(gguf::BlockQ6_K, qh) + 32 * half + 8 * q;
    const uint32_t ql_lo = units::u32_align2(ql), ql_hi = units::u32_align2(ql + 4);
    const uint32_t qh_lo = units::u32_align2(qh), qh_hi = units::u32_align2(qh + 4);
    // Elements 0..15 of the sub-block use one scale, 16..31 the next: lanes 0-1 vs 2-3.
    const auto sc = static_cast<int8_t>(b[offsetof(gguf::BlockQ6_K, scales) + 8 * half + 2 * k + q / 2]);
    const float scale = __fmul_rn(units::f16_at(b + offsetof(gguf::BlockQ6_K, d)), static_cast<float>(sc));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t low = (units::byte_of(i < 4 ? ql_lo : ql_hi, i & 3) >> (4 * (k / 2))) & 0x0f;
      const uint32_t high = (units::byte_of(i < 4 ? qh_lo : qh_hi, i & 3) >> (2 * k)) & 3u;
      w[i] = __fmul_rn(scale, static_cast<float>(static_cast<int>(low | (high << 4)) - 32));
    }
  }
};

// Calls fn(Unit{}) for a weight format with a unit decoder and returns true; false otherwise.
template <typename Fn>
bool visit_unit_format(DType type, Fn&& fn) {
  switch (type) {
    case DType::F32: fn(UnitF32{}); return true;
    case DType::F16: fn(UnitF16{}); return true;
    case DType::BF16: fn(UnitBF16{}); return true;
    case DType::Q8_0: fn(UnitQ8_0{}); return true;
    case DType::Q4_0: fn(UnitQ4_0{}); return true;
    case DType::Q4_1: fn(UnitQ4_1{}); return true;
    case DType::Q5_0: fn(UnitQ5_0{}); return true;
    case DType::Q5_1: fn(UnitQ5_1{}); return true;
    case DType::Q4_K: fn(UnitQ4_K{}); return true;
    case DType::Q5_K: fn(UnitQ5_K{}); return true;
    case DType::Q6_K: fn(UnitQ6_K{}); return true;
    default: return false;
  }
}

}  // namespace cellm::cuda
