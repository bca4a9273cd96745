#pragma once
// One lane's whole weight block against one token's activations, for the single-token kernel
// (gemv_one_token.cu): the block's exact integer dot product and the float operands that the
// contract (matmul_kernels.h) folds into the output, as a float4 {x, y, z, w}:
//   acc = fma(x, y, acc), then for the formats with a min term acc = fma(z, w, acc).
// A block's activations are loaded apart from its terms (load_activations, then terms), so the
// kernel asks for them before it waits for the weights: loaded where they are used, every dot
// product step waited on its loads (ncu: most of the kernel's stalls, a warp issuing an
// instruction every ~17 cycles).
// The operands are the ones gemv.cu's split-block lanes produce (float(isum), d_w * d_a, ...),
// so both kernels give the CPU's bits. The integer sums are exact, so they may be formed in any
// order; this file forms them with few instructions:
//  - nibbles are multiplied where they sit: the high nibble masked in place (x16) with an
//    unsigned-by-signed dp4a, the product shifted back down once per 32 values;
//  - a constant offset (Q4_0's -8, Q5_0's -16, Q6_K's -32) is applied to the sum, not the codes:
//    sum((q - o) a) = sum(q a) - o sum(a), with sum(a) from a dp4a against ones or from Q8_K's
//    group sums.
// The weight block has been staged in shared memory at its address's offset modulo 16, so the
// 18-, 22-, 34- and 210-byte blocks sit 2-byte aligned: those read the aligned words around them
// and shift (up to 4 bytes past the block: the staging area has that slack).
// Each Terms type extends the format's description in weight_units_int8.cuh (sizes, activation
// format, packed fields) with the whole-block computation; TermsOf<Format> finds it.
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/weight_units_int8.cuh"

namespace cellm::cuda::exact::one_lane {

constexpr uint32_t kHigh = 0xf0f0f0f0u;
constexpr int kOnes = 0x01010101;

// Unsigned bytes of `u` times signed bytes of `s`, plus c.
__device__ __forceinline__ int dp4a_us(uint32_t u, int s, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(u), "r"(s), "r"(c));
  return d;
}

// One token's quantized activations (matmul_kernels.h has the layout): in shared memory when
// the kernel quantized the row itself, else in global memory.
struct TokenActivations {
  const int8_t* codes;
  const float* scales;
  const float* sums;          // Q8_1
  const int16_t* group_sums;  // Q8_K
};

__device__ __forceinline__ uint4 load16(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ float half_bits(uint32_t bits) { return __half2float(__ushort_as_half(static_cast<unsigned short>(bits))); }

// 32 activation codes as eight words.
__device__ __forceinline__ void load_codes32(const int8_t* p, int (&a)[8]) {
  const int4 lo = reinterpret_cast<const int4*>(p)[0], hi = reinterpret_cast<const int4*>(p)[1];
  a[0] = lo.x, a[1] = lo.y, a[2] = lo.z, a[3] = lo.w, a[4] = hi.x, a[5] = hi.y, a[6] = hi.z, a[7] = hi.w;
}

// ---------------------------------------------------------------------------------------------
// 32-element formats: qs[l] holds element l (low nibble) and l + 16 (high nibble); Q5 formats
// add bit l of qh as the fifth bit of element l.

// The exact dot of 32 codes q (four words of low nibbles in qs, their high nibbles for elements
// 16..31; fifth bits from qh when kQh) with the activation words a.
template <bool kQh>
__device__ __forceinline__ int nibble_block_dot(const uint32_t (&qs)[4], uint32_t qh, const int (&a)[8]) {
  int lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t l = qs[i] & kLow4;
    if constexpr (kQh) {
      l |= spread_fifth_bits((qh >> (4 * i)) & 0xfu);
      const uint32_t h = ((qs[i] >> 4) & kLow4) | spread_fifth_bits((qh >> (16 + 4 * i)) & 0xfu);
      hi = dp4a_us(h, a[4 + i], hi);
    } else {
      hi = dp4a_us(qs[i] & kHigh, a[4 + i], hi);  // 16 x the high nibbles
    }
    lo = dp4a_us(l, a[i], lo);
  }
  if constexpr (!kQh) hi >>= 4;  // exact: every term is a multiple of 16
  return lo + hi;
}

__device__ __forceinline__ int code_sum32(const int (&a)[8]) {
  int s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = __dp4a(kOnes, a[i], s);
  return s;
}

template <DType kT>
struct Block32Terms : Block32<kT> {
  using Block32<kT>::kHasMin;

  // Block b's activations: its 32 codes, scale and (Q4_1, Q5_1) sum.
  struct Activations {
    int codes[8];
    float scale, sum;
  };
  __device__ static Activations load_activations(const TokenActivations& act, int b) {
    Activations x;
    load_codes32(act.codes + 32 * b, x.codes);
    x.scale = act.scales[b];
    x.sum = kHasMin ? act.sums[b] : 0.0f;
    return x;
  }

  __device__ static float4 terms(const uint8_t* block, const Activations& x) {
    const int(&a)[8] = x.codes;
    const float da = x.scale;
    int isum;
    float dw, m = 0.0f, sa = 0.0f;
    if constexpr (kT == DType::Q8_0) {
      uint32_t q[8];
      load_words_align2(block + 2, q);
      dw = half_at(block);
      isum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) isum = __dp4a(static_cast<int>(q[i]), a[i], isum);
    } else if constexpr (kT == DType::Q4_1) {  // 20 bytes: 4-byte aligned
      const auto* w = reinterpret_cast<const uint32_t*>(block);
      const uint32_t dm = w[0];
      const uint32_t q[4] = {w[1], w[2], w[3], w[4]};
      dw = half_bits(dm), m = half_bits(dm >> 16);
      isum = nibble_block_dot<false>(q, 0, a);
    } else if constexpr (kT == DType::Q5_1) {  // 24 bytes: 8-byte aligned
      const auto* w = reinterpret_cast<const uint2*>(block);
      const uint2 w0 = w[0], w1 = w[1], w2 = w[2];
      dw = half_bits(w0.x), m = half_bits(w0.x >> 16);
      const uint32_t q[4] = {w1.x, w1.y, w2.x, w2.y};
      isum = nibble_block_dot<true>(q, w0.y, a);
    } else {  // Q4_0 (d, qs) and Q5_0 (d, qh, qs): 2-byte aligned; codes carry an offset
      constexpr bool kQh = kT == DType::Q5_0;
      uint32_t words[kQh ? 5 : 4];
      load_words_align2(block + 2, words);
      const uint32_t q[4] = {words[kQh ? 1 : 0], words[kQh ? 2 : 1], words[kQh ? 3 : 2], words[kQh ? 4 : 3]};
      dw = half_at(block);
      isum = nibble_block_dot<kQh>(q, kQh ? words[0] : 0u, a) - (kQh ? 16 : 8) * code_sum32(a);
    }
    if constexpr (kHasMin) sa = x.sum;
    return make_float4(small_int_to_float(isum), __fmul_rn(dw, da), m, sa);
  }
};

// ---------------------------------------------------------------------------------------------
// k-quants (256 elements, 8 or 16 scale groups; Q8_K activations with their 16 group sums).

__device__ __forceinline__ int byte_of(uint32_t w, int i) { return static_cast<int>((w >> (8 * i)) & 0xffu); }

// Super-block b's Q8_K activations: 256 codes, 16 group sums (int16 pairs), the scale.
struct KActivations {
  int4 codes[16];
  int4 groups[2];
  float scale;
};
__device__ __forceinline__ KActivations load_k_activations(const TokenActivations& act, int b) {
  KActivations x;
#pragma unroll
  for (int i = 0; i < 16; ++i) x.codes[i] = reinterpret_cast<const int4*>(act.codes + 256 * b)[i];
  x.groups[0] = reinterpret_cast<const int4*>(act.group_sums + 16 * b)[0];
  x.groups[1] = reinterpret_cast<const int4*>(act.group_sums + 16 * b)[1];
  x.scale = act.scales[b];
  return x;
}

// sum over the 8 sub-blocks s of mins[s] * (group sum 2s + group sum 2s + 1): the group sums
// come as int16 pairs, one word per sub-block; dp2a multiplies a pair by two bytes.
__device__ __forceinline__ int k_min_sum(const KScaleWords& k, const int4 (&group_words)[2]) {
  const int4 g0 = group_words[0], g1 = group_words[1];
  const int g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
  int sum = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t mins = j < 2 ? k.mins_lo : k.mins_hi;
    // bytes (m_2j, m_2j, m_2j+1, m_2j+1) of this pair of sub-blocks
    const int twice = static_cast<int>(__byte_perm(mins, 0, (j & 1) ? 0x3322u : 0x1100u));
    sum = __dp2a_lo(g[2 * j], twice, sum);
    sum = __dp2a_hi(g[2 * j + 1], twice, sum);
  }
  return sum;
}

template <bool kFifthBit>
struct KAsymmetricTerms : KAsymmetric<kFifthBit> {  // Q4_K, Q5_K
  using KAsymmetric<kFifthBit>::kQs;

  using Activations = KActivations;
  __device__ static Activations load_activations(const TokenActivations& act, int b) {
    return load_k_activations(act, b);
  }

  __device__ static float4 terms(const uint8_t* block, const Activations& x) {
    const int4(&codes)[16] = x.codes;
    const int4(&group_words)[2] = x.groups;
    const float da = x.scale;
    const uint4 head = load16(block);  // d, dmin, 12 bytes of scales
    uint4 qs[8], qh[2] = {};
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[i] = load16(block + kQs + 16 * i);
    if constexpr (kFifthBit) qh[0] = load16(block + 16), qh[1] = load16(block + 32);
    const uint32_t high_bits[8] = {qh[0].x, qh[0].y, qh[0].z, qh[0].w, qh[1].x, qh[1].y, qh[1].z, qh[1].w};
    const KScaleWords k = k_scale_words(head.y, head.z, head.w);
    int isum = 0;
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // qs[32c .. 32c+32): sub-blocks 2c (low nibbles) and 2c+1
      const int4 l0 = codes[4 * c], l1 = codes[4 * c + 1], h0 = codes[4 * c + 2], h1 = codes[4 * c + 3];
      const int a_lo[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
      const int a_hi[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
      const uint32_t q[8] = {qs[2 * c].x, qs[2 * c].y, qs[2 * c].z, qs[2 * c].w,
                             qs[2 * c + 1].x, qs[2 * c + 1].y, qs[2 * c + 1].z, qs[2 * c + 1].w};
      int lo = 0, hi = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if constexpr (kFifthBit) {
          const uint32_t h = high_bits[i];
          lo = dp4a_us((q[i] & kLow4) | (((h >> (2 * c)) & 0x01010101u) << 4), a_lo[i], lo);
          hi = dp4a_us(((q[i] >> 4) & kLow4) | (((h >> (2 * c + 1)) & 0x01010101u) << 4), a_hi[i], hi);
        } else {
          lo = dp4a_us(q[i] & kLow4, a_lo[i], lo);
          hi = dp4a_us(q[i] & kHigh, a_hi[i], hi);
        }
      }
      if constexpr (!kFifthBit) hi >>= 4;
      const uint32_t sc = c < 2 ? k.scales_lo : k.scales_hi;
      isum += byte_of(sc, 2 * (c & 1)) * lo + byte_of(sc, 2 * (c & 1) + 1) * hi;
    }
    const int msum = k_min_sum(k, group_words);
    return make_float4(__int2float_rn(isum), __fmul_rn(half_bits(head.x), da), __int2float_rn(msum),
                       __fmul_rn(half_bits(head.x >> 16), -da));
  }
};

// Q6_K (210 bytes: ql[128], qh[64], int8 scales[16], d): element 128h + 32k + l (k = 0..3,
// l = 0..31) is ql[64h + l + 32 (k & 1)] (low nibble for k < 2, high for k >= 2) with bits
// 2k, 2k+1 of qh[32h + l] above it, minus 32; its scale is scales[8h + 2k + l / 16].
struct Q6KTerms : KQ6 {

  using Activations = KActivations;
  __device__ static Activations load_activations(const TokenActivations& act, int b) {
    return load_k_activations(act, b);
  }

  __device__ static float4 terms(const uint8_t* block, const Activations& x) {
    const int4(&codes)[16] = x.codes;
    const int4 g0 = x.groups[0], g1 = x.groups[1];
    const int group_pairs[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};  // int16 pairs
    const float da = x.scale;
    uint32_t sc_words[4];
    load_words_align2(block + 192, sc_words);
    int isum = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t ql[16], qh[8];
      load_words_align2(block + 64 * h, ql);
      load_words_align2(block + 128 + 32 * h, qh);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // l in [16 half, 16 half + 16): one scale group
          const int g = 8 * h + 2 * k + half;  // codes 16 g .. 16 g + 15
          const int4 v = codes[g];
          const int a[4] = {v.x, v.y, v.z, v.w};
          int dot = 0;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int word = 4 * half + i;  // bytes l = 4 word .. 4 word + 3
            const uint32_t src = ql[word + 8 * (k & 1)];
            const uint32_t low = k < 2 ? (src & kLow4) : ((src >> 4) & kLow4);
            const uint32_t q = low | (((qh[word] >> (2 * k)) & 0x03030303u) << 4);
            dot = dp4a_us(q, a[i], dot);
          }
          const int scale = static_cast<int8_t>(sc_words[g / 4] >> (8 * (g % 4)));
          const int group_sum = static_cast<int16_t>(group_pairs[g / 2] >> (16 * (g % 2)));
          isum += scale * (dot - 32 * group_sum);
        }
      }
    }
    return make_float4(__int2float_rn(isum), __fmul_rn(half_at(block + 208), da), 0.0f, 0.0f);
  }
};

// The Terms type of each format of visit_exact_format.
template <class Format>
struct TermsOf;
template <DType kT>
struct TermsOf<Block32<kT>> {
  using type = Block32Terms<kT>;
};
template <bool kFifthBit>
struct TermsOf<KAsymmetric<kFifthBit>> {
  using type = KAsymmetricTerms<kFifthBit>;
};
template <>
struct TermsOf<KQ6> {
  using type = Q6KTerms;
};

}  // namespace cellm::cuda::exact::one_lane
