#pragma once
// The block layouts of ggml's quantized formats, byte for byte as GGUF files store them, so a
// tensor's bytes can be read in place as an array of blocks. Half-precision fields are raw
// IEEE fp16 bits (convert with core/half.h). The structs are packed (alignment 1) so a block
// may sit at any address; every field is naturally aligned anyway, so access costs nothing.
//
// Element order inside a block, which kernels must follow:
//  - Q4_0/Q4_1: element j (0..15) is the low nibble of qs[j], element j+16 its high nibble.
//  - Q5_0/Q5_1: as Q4, plus a fifth bit: bit j of the little-endian 32-bit qh is element j's.
//  - Q4_K: 8 sub-blocks of 32. Byte chunk c = qs[32c..32c+31] holds sub-block 2c in its low
//    nibbles and 2c+1 in its high nibbles. Sub-block s has scale d*sc[s] and min dmin*m[s]
//    (6-bit sc/m packed in `scales`, see quant_k_scales.h): x = d*sc*q - dmin*m.
//  - Q5_K: as Q4_K, plus bit s of qh[l] is the fifth bit of element l of sub-block s.
//  - Q6_K: two halves of 128; half h uses ql[64h..64h+63], qh[32h..32h+31]. Within a half,
//    element 32k+l (k 0..3, l 0..31) is the low nibble of ql[64h+l+32(k&1)] when k < 2, else
//    its high nibble, with two high bits (qh[32h+l] >> 2k) & 3; q - 32 is scaled by
//    d*scales[e/16] where e is the element's index in the block.
//  - Q8_K (activations for k-quant dot products): x = d*qs; bsums[g] = sum of qs[16g..16g+15].
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace cellm::gguf {

inline constexpr int kBlockElements = 32;     // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
inline constexpr int kSuperBlockElements = 256;  // the k-quants
inline constexpr int kKScaleBytes = 12;       // 8 six-bit scales + 8 six-bit mins

#pragma pack(push, 1)

struct BlockQ8_0 {
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kElements = kBlockElements;
  uint16_t d;  // fp16 scale
  int8_t qs[kBlockElements];
};

struct BlockQ4_0 {
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kElements = kBlockElements;
  uint16_t d;  // fp16 scale; x = d * (q - 8)
  uint8_t qs[kBlockElements / 2];
};

struct BlockQ4_1 {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kElements = kBlockElements;
  uint16_t d;  // fp16 scale; x = d * q + m
  uint16_t m;  // fp16 offset
  uint8_t qs[kBlockElements / 2];
};

struct BlockQ5_0 {
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kElements = kBlockElements;
  uint16_t d;  // fp16 scale; x = d * (q - 16)
  uint8_t qh[4];
  uint8_t qs[kBlockElements / 2];
};

struct BlockQ5_1 {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kElements = kBlockElements;
  uint16_t d;  // fp16 scale; x = d * q + m
  uint16_t m;  // fp16 offset
  uint8_t qh[4];
  uint8_t qs[kBlockElements / 2];
};

struct BlockQ4_K {
  static constexpr DType kType = DType::Q4_K;
  static constexpr int kElements = kSuperBlockElements;
  uint16_t d;     // fp16 scale of the sub-block scales
  uint16_t dmin;  // fp16 scale of the sub-block mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kSuperBlockElements / 2];
};

struct BlockQ5_K {
  static constexpr DType kType = DType::Q5_K;
  static constexpr int kElements = kSuperBlockElements;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kSuperBlockElements / 8];
  uint8_t qs[kSuperBlockElements / 2];
};

struct BlockQ6_K {
  static constexpr DType kType = DType::Q6_K;
  static constexpr int kElements = kSuperBlockElements;
  uint8_t ql[kSuperBlockElements / 2];
  uint8_t qh[kSuperBlockElements / 4];
  int8_t scales[kSuperBlockElements / 16];
  uint16_t d;  // fp16 scale of the sub-block scales
};

struct BlockQ8_K {
  static constexpr DType kType = DType::Q8_K;
  static constexpr int kElements = kSuperBlockElements;
  float d;
  int8_t qs[kSuperBlockElements];
  int16_t bsums[kSuperBlockElements / 16];
};

#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34 && alignof(BlockQ8_0) == 1);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && offsetof(BlockQ5_0, qs) == 6);
static_assert(sizeof(BlockQ5_1) == 24 && offsetof(BlockQ5_1, qs) == 8);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, qh) == 16 && offsetof(BlockQ5_K, qs) == 48);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);
static_assert(sizeof(BlockQ8_K) == 292 && offsetof(BlockQ8_K, bsums) == 260);

// Calls visit(std::type_identity<Block>{}) with the block struct of a quantized `type` and
// returns true; returns false, calling nothing, for types without a block struct here.
template <typename Visit>
bool visit_block_type(DType type, Visit&& visit) {
  switch (type) {
    case DType::Q8_0: visit(std::type_identity<BlockQ8_0>{}); return true;
    case DType::Q4_0: visit(std::type_identity<BlockQ4_0>{}); return true;
    case DType::Q4_1: visit(std::type_identity<BlockQ4_1>{}); return true;
    case DType::Q5_0: visit(std::type_identity<BlockQ5_0>{}); return true;
    case DType::Q5_1: visit(std::type_identity<BlockQ5_1>{}); return true;
    case DType::Q4_K: visit(std::type_identity<BlockQ4_K>{}); return true;
    case DType::Q5_K: visit(std::type_identity<BlockQ5_K>{}); return true;
    case DType::Q6_K: visit(std::type_identity<BlockQ6_K>{}); return true;
    case DType::Q8_K: visit(std::type_identity<BlockQ8_K>{}); return true;
    default: return false;
  }
}

}  // namespace cellm::gguf
