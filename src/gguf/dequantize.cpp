#include "gguf/dequantize.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "gguf/quant_k_scales.h"

// Every formula below performs the same float32 operations, in the same order, as the gguf
// package's numpy dequantizer (a product, then at most one sum), so results match it bit for
// bit. The products of fp16 scales and small integers are exact in float32, so even a fused
// multiply-add could not change a result; the file is compiled with -ffp-contract=off
// (src/CMakeLists.txt) all the same, so that stays true whatever a formula becomes.

namespace cellm::gguf {
namespace {

void decode_block(const BlockQ8_0& block, float* y) {
  const float d = fp16_to_fp32(block.d);
  for (int j = 0; j < kBlockElements; ++j) y[j] = static_cast<float>(block.qs[j]) * d;
}

void decode_block(const BlockQ4_0& block, float* y) {
  const float d = fp16_to_fp32(block.d);
  for (int j = 0; j < kBlockElements / 2; ++j) {
    y[j] = d * static_cast<float>((block.qs[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((block.qs[j] >> 4) - 8);
  }
}

void decode_block(const BlockQ4_1& block, float* y) {
  const float d = fp16_to_fp32(block.d);
  const float m = fp16_to_fp32(block.m);
  for (int j = 0; j < kBlockElements / 2; ++j) {
    y[j] = d * static_cast<float>(block.qs[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(block.qs[j] >> 4) + m;
  }
}

uint32_t load_qh(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
         static_cast<uint32_t>(qh[3]) << 24;
}

// The 5-bit values 0..31 of a Q5_0/Q5_1 block.
void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  const uint32_t qh = load_qh(qh_bytes);
  for (int j = 0; j < kBlockElements / 2; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void decode_block(const BlockQ5_0& block, float* y) {
  const float d = fp16_to_fp32(block.d);
  int q[kBlockElements];
  unpack_q5(block.qs, block.qh, q);
  for (int j = 0; j < kBlockElements; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

void decode_block(const BlockQ5_1& block, float* y) {
  const float d = fp16_to_fp32(block.d);
  const float m = fp16_to_fp32(block.m);
  int q[kBlockElements];
  unpack_q5(block.qs, block.qh, q);
  for (int j = 0; j < kBlockElements; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

// Q4_K and Q5_K share the sub-block scheme; Q5_K adds a fifth bit from qh.
template <bool kFifthBit>
void dequantize_k_asymmetric(uint16_t d_bits, uint16_t dmin_bits, const uint8_t* scales, const uint8_t* qs,
                             const uint8_t* qh, float* y) {
  const float d = fp16_to_fp32(d_bits);
  const float dmin = fp16_to_fp32(dmin_bits);
  for (int s = 0; s < 8; ++s) {
    const KScaleMin sm = unpack_k_scale_min(scales, s);
    const float scale = d * static_cast<float>(sm.scale);
    const float min = dmin * static_cast<float>(sm.min);
    const uint8_t* chunk = qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) {
      int q = (chunk[l] >> shift) & 0x0f;
      if constexpr (kFifthBit) q |= ((qh[l] >> s) & 1) << 4;
      y[32 * s + l] = scale * static_cast<float>(q) - min;
    }
  }
}

void decode_block(const BlockQ4_K& block, float* y) {
  dequantize_k_asymmetric<false>(block.d, block.dmin, block.scales, block.qs, nullptr, y);
}

void decode_block(const BlockQ5_K& block, float* y) {
  dequantize_k_asymmetric<true>(block.d, block.dmin, block.scales, block.qs, block.qh, y);
}

void decode_block(const BlockQ6_K& block, float* y) {
  const float d = fp16_to_fp32(block.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = block.ql + 64 * half;
    const uint8_t* qh = block.qh + 32 * half;
    float* out = y + 128 * half;
    for (int k = 0; k < 4; ++k) {
      const float scale = d * static_cast<float>(block.scales[8 * half + 2 * k]);
      const float scale_hi = d * static_cast<float>(block.scales[8 * half + 2 * k + 1]);
      for (int l = 0; l < 32; ++l) {
        const int low = (ql[l + 32 * (k & 1)] >> (4 * (k / 2))) & 0x0f;
        const int q = (low | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        out[32 * k + l] = (l < 16 ? scale : scale_hi) * static_cast<float>(q);
      }
    }
  }
}

void decode_block(const BlockQ8_K& block, float* y) {
  for (int j = 0; j < kSuperBlockElements; ++j) y[j] = block.d * static_cast<float>(block.qs[j]);
}

bool is_float_type(DType type) { return type == DType::F32 || type == DType::F16 || type == DType::BF16; }

}  // namespace

bool can_dequantize(DType type) { return is_float_type(type) || visit_block_type(type, [](auto) {}); }

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  if (!can_dequantize(type))
    fail(ErrorCode::Unsupported, "dequantization of ", dtype_name(type), " tensors is not implemented");
  const size_t bytes = row_bytes(type, n);  // throws when n is not a whole number of blocks
  const auto* half_bits = static_cast<const uint16_t*>(src);
  if (type == DType::F32) {
    std::memcpy(dst, src, bytes);
  } else if (type == DType::F16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(half_bits[i]);
  } else if (type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(half_bits[i]);
  }
  visit_block_type(type, [&]<typename Block>(std::type_identity<Block>) {
    const auto* blocks = static_cast<const Block*>(src);
    for (int64_t b = 0; b < n / Block::kElements; ++b) decode_block(blocks[b], dst + b * Block::kElements);
  });
}

}  // namespace cellm::gguf
