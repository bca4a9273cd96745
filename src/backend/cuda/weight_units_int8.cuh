#pragma once
// The exact integer kernels' view of one quantized weight block: a lane's share of the block
// as signed int8 words (four values per word, ready for __dp4a), the integer scales that
// weight its partial dot products, and the block's float factors. The integer results are
// exact, so any split of a block over lanes gives the CPU's block sums (matmul_kernels.h has
// the float contract).
//
// A block is split over kLanes lanes ("parts"):
//  - 32-element formats, 2 lanes: part h holds elements [16h, 16h+16) of Q8_0; of the nibble
//    formats the low nibbles of qs[8h, 8h+8) (elements 8h..8h+7) and their high nibbles
//    (elements 16+8h..16+8h+7);
//  - Q4_K/Q5_K, 4 lanes: part j holds sub-blocks 2j and 2j+1 (qs[32j, 32j+32));
//  - Q6_K, 4 lanes: part j holds, of half h = j/2, the positions l in [16(j%2), 16(j%2)+16)
//    of its four 32-element quarters (elements 128h + 32k + l, k = 0..3).
// Blocks are read from shared memory where they sit at their offset in the row, so only the
// 144- and 176-byte k-quants are 16-byte aligned; the others use load_words_align2.
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/matmul_kernels.h"
#include "gguf/quant_blocks.h"

namespace cellm::cuda::exact {

constexpr uint32_t kLow4 = 0x0f0f0f0fu;

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

// kWords words starting at the 2-byte aligned shared-memory address p (reads the kWords + 1
// aligned words from p rounded down, up to 4 bytes past the words).
template <int kWords>
__device__ __forceinline__ void load_words_align2(const uint8_t* p, uint32_t (&out)[kWords]) {
  const auto* w = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const uint32_t shift = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 2u) * 8u;
  uint32_t v[kWords + 1];
#pragma unroll
  for (int i = 0; i <= kWords; ++i) v[i] = w[i];
#pragma unroll
  for (int i = 0; i < kWords; ++i) out[i] = __funnelshift_r(v[i], v[i + 1], shift);
}

// Activation codes (global memory, read through the read-only cache).
__device__ __forceinline__ void load_codes16(const int8_t* p, int (&a)[4]) {
  const int4 v = __ldg(reinterpret_cast<const int4*>(p));
  a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
}
__device__ __forceinline__ int2 load_codes8(const int8_t* p) { return __ldg(reinterpret_cast<const int2*>(p)); }

// Four 1-bit values (bits 0..3 of x) moved to bit 4 of each byte.
__device__ __forceinline__ uint32_t spread_fifth_bits(uint32_t x) { return ((x * 0x00204081u) & 0x01010101u) << 4; }

// w: four consecutive words of a lane's register array (indices known at compile time).
__device__ __forceinline__ int dot4(const uint32_t* w, const int (&a)[4], int acc) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc = __dp4a(static_cast<int>(w[i]), a[i], acc);
  return acc;
}

// ---------------------------------------------------------------------------------------------
// 32-element formats. Lane(part) = four words; partial(lane, codes of the block) = its share of
// the block's integer dot product. Factors: d (and m for Q4_1/Q5_1).

template <DType kT>
struct Block32 {
  static constexpr DType kType = kT;
  static constexpr int kLanes = 2;
  static constexpr int kElems = 32;
  static constexpr bool kHasMin = kT == DType::Q4_1 || kT == DType::Q5_1;
  static constexpr ActivationFormat kActivations = kHasMin ? ActivationFormat::Q8_1 : ActivationFormat::Q8_0;
  static constexpr int kBlockBytes = kT == DType::Q8_0   ? 34
                                     : kT == DType::Q4_0 ? 18
                                     : kT == DType::Q4_1 ? 20
                                     : kT == DType::Q5_0 ? 22
                                                         : 24;
  // Byte offsets of qs, qh (-1: none) and m (-1: none) inside the block.
  static constexpr int kQs = kT == DType::Q8_0 ? 2 : kT == DType::Q4_0 ? 2 : kT == DType::Q4_1 ? 4 : kT == DType::Q5_0 ? 6 : 8;
  static constexpr int kQh = kT == DType::Q5_0 ? 2 : kT == DType::Q5_1 ? 4 : -1;
  static constexpr int kMin = kHasMin ? 2 : -1;
  static constexpr uint32_t kZero = kT == DType::Q4_0 ? 0x08080808u : kT == DType::Q5_0 ? 0x10101010u : 0u;

  struct Lane {
    uint32_t w[4];
  };

  __device__ static void lane(const uint8_t* block, int part, Lane& l) {
    if constexpr (kT == DType::Q8_0) {
      load_words_align2(block + kQs + 16 * part, l.w);
    } else {
      uint32_t qs[2], qh_word[1];
      load_words_align2(block + kQs + 8 * part, qs);
      l.w[0] = qs[0] & kLow4;  // elements 8h..8h+3
      l.w[1] = qs[1] & kLow4;  // 8h+4..8h+7
      l.w[2] = (qs[0] >> 4) & kLow4;  // 16+8h..
      l.w[3] = (qs[1] >> 4) & kLow4;  // 16+8h+4..
      if constexpr (kQh >= 0) {
        load_words_align2(block + kQh, qh_word);
        const uint32_t qh = qh_word[0] >> (8 * part);
        l.w[0] |= spread_fifth_bits(qh & 0xfu);
        l.w[1] |= spread_fifth_bits((qh >> 4) & 0xfu);
        l.w[2] |= spread_fifth_bits((qh >> 16) & 0xfu);
        l.w[3] |= spread_fifth_bits((qh >> 20) & 0xfu);
      }
      if constexpr (kZero != 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) l.w[i] = __vsub4(l.w[i], kZero);
      }
    }
  }

  // `codes`: the block's 32 activation codes.
  __device__ static int partial(const Lane& l, int part, const int8_t* codes) {
    int a[4];
    if constexpr (kT == DType::Q8_0) {
      load_codes16(codes + 16 * part, a);
    } else {
      const int2 lo = load_codes8(codes + 8 * part), hi = load_codes8(codes + 16 + 8 * part);
      a[0] = lo.x, a[1] = lo.y, a[2] = hi.x, a[3] = hi.y;
    }
    return dot4(l.w, a, 0);
  }

  // The lane's words into the block's 32 int8 slots of a tile row (4-byte aligned).
  __device__ static void store(const Lane& l, int part, int8_t* block_row) {
    auto* w = reinterpret_cast<uint32_t*>(block_row);
    if constexpr (kT == DType::Q8_0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) w[4 * part + i] = l.w[i];
    } else {
      w[2 * part] = l.w[0], w[2 * part + 1] = l.w[1], w[4 + 2 * part] = l.w[2], w[4 + 2 * part + 1] = l.w[3];
    }
  }

  __device__ static float d(const uint8_t* block) { return half_at(block); }
  __device__ static float m(const uint8_t* block) {
    if constexpr (kHasMin) return half_at(block + kMin);
    return 0.0f;
  }
};

// ---------------------------------------------------------------------------------------------
// k-quants, four lanes per super-block.

// Packed 6-bit scales and mins of Q4_K/Q5_K (the 12 bytes after d and dmin): bytes s of
// `scales` / `mins` (s = 0..7) as in gguf/quant_k_scales.h.
struct KScaleWords {
  uint32_t scales_lo, scales_hi, mins_lo, mins_hi;
};
__device__ __forceinline__ KScaleWords k_scale_words(uint32_t a0, uint32_t a1, uint32_t a2) {
  return {a0 & 0x3f3f3f3fu, (a2 & kLow4) | ((a0 >> 2) & 0x30303030u), a1 & 0x3f3f3f3fu,
          ((a2 >> 4) & kLow4) | ((a1 >> 2) & 0x30303030u)};
}

template <bool kFifthBit>
struct KAsymmetric {  // Q4_K, Q5_K
  static constexpr DType kType = kFifthBit ? DType::Q5_K : DType::Q4_K;
  static constexpr int kLanes = 4;
  static constexpr int kElems = 256;
  static constexpr bool kHasMin = true;
  static constexpr ActivationFormat kActivations = ActivationFormat::Q8_K;
  static constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  static constexpr int kQs = kFifthBit ? 48 : 16;

  // Scales and mins of sub-blocks 2 part and 2 part + 1.
  struct ScalePair {
    int sc0, sc1, m0, m1;
  };

  struct Lane {
    uint32_t lo[8];  // sub-block 2j, elements 64j + 4i ..
    uint32_t hi[8];  // sub-block 2j+1, elements 64j + 32 + 4i ..
    ScalePair scales;
  };

  // A ScalePair from the bytes of k_scale_words' words.
  __device__ static ScalePair scale_pair(const KScaleWords& k, int part) {
    const uint32_t sw = part < 2 ? k.scales_lo : k.scales_hi, mw = part < 2 ? k.mins_lo : k.mins_hi;
    const int shift = 16 * (part & 1);
    return {static_cast<int>((sw >> shift) & 0xffu), static_cast<int>((sw >> (shift + 8)) & 0xffu),
            static_cast<int>((mw >> shift) & 0xffu), static_cast<int>((mw >> (shift + 8)) & 0xffu)};
  }

  // Codes of sub-blocks 2 part (lo) and 2 part + 1 (hi) at four element positions: q, a word of
  // the 32 code bytes of run `part` (low nibbles one sub-block, high nibbles the other) and,
  // for Q5_K, h, the qh word of the same positions (bit 2 part and 2 part + 1 the fifth bits).
  __device__ static void codes(uint32_t q, uint32_t h, int part, uint32_t& lo, uint32_t& hi) {
    lo = q & kLow4;
    hi = (q >> 4) & kLow4;
    if constexpr (kFifthBit) {
      lo |= ((h >> (2 * part)) & 0x01010101u) << 4;
      hi |= ((h >> (2 * part + 1)) & 0x01010101u) << 4;
    }
  }

  __device__ static void lane(const uint8_t* block, int part, Lane& l) {
    const uint4 head = *reinterpret_cast<const uint4*>(block);
    l.scales = scale_pair(k_scale_words(head.y, head.z, head.w), part);
    const uint4 q0 = *reinterpret_cast<const uint4*>(block + kQs + 32 * part);
    const uint4 q1 = *reinterpret_cast<const uint4*>(block + kQs + 32 * part + 16);
    const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    uint32_t h[8] = {};
    if constexpr (kFifthBit) {
      const uint4 h0 = *reinterpret_cast<const uint4*>(block + 16);
      const uint4 h1 = *reinterpret_cast<const uint4*>(block + 32);
      h[0] = h0.x, h[1] = h0.y, h[2] = h0.z, h[3] = h0.w, h[4] = h1.x, h[5] = h1.y, h[6] = h1.z, h[7] = h1.w;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) codes(q[i], h[i], part, l.lo[i], l.hi[i]);
  }

  // `codes`: the super-block's 256 activation codes; `groups`: its 16 group sums.
  __device__ static int partial(const Lane& l, int part, const int8_t* codes, const int16_t* groups, int& min_sum) {
    int a[4];
    int lo = 0, hi = 0;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      load_codes16(codes + 64 * part + 16 * c, a);
      lo = dot4(l.lo + 4 * c, a, lo);
      load_codes16(codes + 64 * part + 32 + 16 * c, a);
      hi = dot4(l.hi + 4 * c, a, hi);
    }
    const int2 g = __ldg(reinterpret_cast<const int2*>(groups + 4 * part));  // group sums 4j .. 4j+3
    const int g0 = static_cast<int16_t>(g.x & 0xffff), g1 = g.x >> 16;
    const int g2 = static_cast<int16_t>(g.y & 0xffff), g3 = g.y >> 16;
    min_sum = l.scales.m0 * (g0 + g1) + l.scales.m1 * (g2 + g3);
    return l.scales.sc0 * lo + l.scales.sc1 * hi;
  }

  __device__ static float d(const uint8_t* block) { return half_at(block); }
  __device__ static float dmin(const uint8_t* block) { return half_at(block + 2); }
};
using KQ4 = KAsymmetric<false>;
using KQ5 = KAsymmetric<true>;

struct KQ6 {
  static constexpr DType kType = DType::Q6_K;
  static constexpr int kLanes = 4;
  static constexpr int kElems = 256;
  static constexpr bool kHasMin = false;
  static constexpr ActivationFormat kActivations = ActivationFormat::Q8_K;
  static constexpr int kBlockBytes = 210;

  struct Lane {
    uint32_t v[4][4];  // [quarter k][word i]: elements 128h + 32k + l0 + 4i ..
    int sc[4];
  };

  __device__ static void lane(const uint8_t* block, int part, Lane& l) {
    const int h = part >> 1, l0 = 16 * (part & 1);
    uint32_t a[4], b[4], c[4];
    load_words_align2(block + 64 * h + l0, a);       // ql: quarters 0 and 2
    load_words_align2(block + 64 * h + 32 + l0, b);  // ql: quarters 1 and 3
    load_words_align2(block + 128 + 32 * h + l0, c); // qh: two bits per quarter
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      l.v[0][i] = __vsub4((a[i] & kLow4) | ((c[i] & 0x03030303u) << 4), 0x20202020u);
      l.v[1][i] = __vsub4((b[i] & kLow4) | (((c[i] >> 2) & 0x03030303u) << 4), 0x20202020u);
      l.v[2][i] = __vsub4(((a[i] >> 4) & kLow4) | (((c[i] >> 4) & 0x03030303u) << 4), 0x20202020u);
      l.v[3][i] = __vsub4(((b[i] >> 4) & kLow4) | (((c[i] >> 6) & 0x03030303u) << 4), 0x20202020u);
    }
    // Scale of elements 128h + 32k + l: scales[8h + 2k + l / 16].
    uint32_t s[2];
    load_words_align2(block + 192 + 8 * h, s);
    const uint32_t shift = 8 * (part & 1);
    l.sc[0] = static_cast<int8_t>(s[0] >> shift);
    l.sc[1] = static_cast<int8_t>(s[0] >> (shift + 16));
    l.sc[2] = static_cast<int8_t>(s[1] >> shift);
    l.sc[3] = static_cast<int8_t>(s[1] >> (shift + 16));
  }

  __device__ static int partial(const Lane& l, int part, const int8_t* codes, const int16_t*, int& min_sum) {
    const int h = part >> 1, l0 = 16 * (part & 1);
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int a[4];
      load_codes16(codes + 128 * h + 32 * k + l0, a);
      sum += l.sc[k] * dot4(l.v[k], a, 0);
    }
    min_sum = 0;
    return sum;
  }

  // Words into the super-block's 256 int8 slots of a tile row; scales per group of 16.
  __device__ static void store(const Lane& l, int part, int8_t* row) {
    auto* w = reinterpret_cast<uint32_t*>(row);
    const int h = part >> 1, l0 = 16 * (part & 1);
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) w[(128 * h + 32 * k + l0) / 4 + i] = l.v[k][i];
  }
  __device__ static void store_scales(const Lane& l, int part, int32_t* scales) {
#pragma unroll
    for (int k = 0; k < 4; ++k) scales[8 * (part >> 1) + 2 * k + (part & 1)] = l.sc[k];
  }

  __device__ static float d(const uint8_t* block) { return half_at(block + 208); }
  __device__ static float dmin(const uint8_t*) { return 0.0f; }
};

// Calls fn(Format{}) for a quantized weight type the exact kernels handle; false otherwise.
template <typename Fn>
bool visit_exact_format(DType type, Fn&& fn) {
  switch (type) {
    case DType::Q8_0: fn(Block32<DType::Q8_0>{}); return true;
    case DType::Q4_0: fn(Block32<DType::Q4_0>{}); return true;
    case DType::Q4_1: fn(Block32<DType::Q4_1>{}); return true;
    case DType::Q5_0: fn(Block32<DType::Q5_0>{}); return true;
    case DType::Q5_1: fn(Block32<DType::Q5_1>{}); return true;
    case DType::Q4_K: fn(KQ4{}); return true;
    case DType::Q5_K: fn(KQ5{}); return true;
    case DType::Q6_K: fn(KQ6{}); return true;
    default: return false;
  }
}

}  // namespace cellm::cuda::exact
