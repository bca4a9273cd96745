#include "gguf/quantize.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "gguf/quant_k_encode.h"
#include "gguf/quant_math.h"

// The 32-element formats follow the gguf package's numpy quantizers operation for operation
// (same scale formula, same float32 rounding steps, same tie-breaking), so they produce the
// same bytes. Compiled with -ffp-contract=off (src/CMakeLists.txt) to keep every rounding step.

namespace cellm::gguf {
namespace {

// numpy's astype(uint8).clip(0, top) of an already truncated value; NaN gives 0.
uint8_t to_level(float truncated, int top) {
  if (!(truncated > 0.0f)) return 0;
  if (truncated >= static_cast<float>(top)) return static_cast<uint8_t>(top);
  return static_cast<uint8_t>(truncated);
}

using quant_math::inverse_or_zero;
using quant_math::signed_absmax;

void encode_block(const float* x, BlockQ8_0& block) {
  float amax = 0.0f;
  for (int j = 0; j < kBlockElements; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = inverse_or_zero(d);
  block.d = fp32_to_fp16(d);
  for (int j = 0; j < kBlockElements; ++j) {
    // numpy's np_roundf rounds half away from zero, as std::round does.
    block.qs[j] = static_cast<int8_t>(quant_math::round_to_level(x[j] * id, -127, 127));
  }
}

void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kBlockElements / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + 16] << 4));
}

void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int j = 0; j < kBlockElements; ++j) qh[j / 8] |= static_cast<uint8_t>((q[j] >> 4) << (j % 8));
}

// Q4_0 / Q5_0: the largest magnitude maps to the lowest level, -2^(bits-1).
template <int kBits>
uint16_t quantize_symmetric_32(const float* x, uint8_t* q) {
  constexpr int kTop = (1 << kBits) - 1;
  constexpr float kOffset = static_cast<float>(1 << (kBits - 1));
  const float d = signed_absmax(x, kBlockElements) / -kOffset;
  const float id = inverse_or_zero(d);
  for (int j = 0; j < kBlockElements; ++j) q[j] = to_level(std::trunc(x[j] * id + (kOffset + 0.5f)), kTop);
  return fp32_to_fp16(d);
}

// Q4_1 / Q5_1: levels spread from the block's minimum to its maximum.
template <int kBits>
void quantize_affine_32(const float* x, uint8_t* q, uint16_t& d_bits, uint16_t& m_bits) {
  constexpr int kTop = (1 << kBits) - 1;
  float max = x[0];
  float min = x[0];
  for (int j = 1; j < kBlockElements; ++j) {
    max = std::fmax(max, x[j]);
    min = std::fmin(min, x[j]);
  }
  const float d = (max - min) / static_cast<float>(kTop);
  const float id = inverse_or_zero(d);
  for (int j = 0; j < kBlockElements; ++j) q[j] = to_level(std::trunc((x[j] - min) * id + 0.5f), kTop);
  d_bits = fp32_to_fp16(d);
  m_bits = fp32_to_fp16(min);
}

void encode_block(const float* x, BlockQ4_0& block) {
  uint8_t q[kBlockElements];
  block.d = quantize_symmetric_32<4>(x, q);
  pack_nibbles(q, block.qs);
}

void encode_block(const float* x, BlockQ4_1& block) {
  uint8_t q[kBlockElements];
  quantize_affine_32<4>(x, q, block.d, block.m);
  pack_nibbles(q, block.qs);
}

void encode_block(const float* x, BlockQ5_0& block) {
  uint8_t q[kBlockElements];
  block.d = quantize_symmetric_32<5>(x, q);
  pack_nibbles(q, block.qs);
  pack_fifth_bits(q, block.qh);
}

void encode_block(const float* x, BlockQ5_1& block) {
  uint8_t q[kBlockElements];
  quantize_affine_32<5>(x, q, block.d, block.m);
  pack_nibbles(q, block.qs);
  pack_fifth_bits(q, block.qh);
}

bool is_float_type(DType type) { return type == DType::F32 || type == DType::F16 || type == DType::BF16; }

}  // namespace

bool can_quantize(DType type) { return is_float_type(type) || visit_block_type(type, [](auto) {}); }

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  if (!can_quantize(type)) fail(ErrorCode::Unsupported, "quantization to ", dtype_name(type), " is not implemented");
  const size_t bytes = row_bytes(type, n);  // throws when n is not a whole number of blocks
  auto* half_bits = static_cast<uint16_t*>(dst);
  if (type == DType::F32) {
    std::memcpy(dst, src, bytes);
  } else if (type == DType::F16) {
    for (int64_t i = 0; i < n; ++i) half_bits[i] = fp32_to_fp16(src[i]);
  } else if (type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) half_bits[i] = fp32_to_bf16(src[i]);
  }
  visit_block_type(type, [&]<typename Block>(std::type_identity<Block>) {
    auto* blocks = static_cast<Block*>(dst);
    for (int64_t b = 0; b < n / Block::kElements; ++b) encode_block(src + b * Block::kElements, blocks[b]);
  });
}

}  // namespace cellm::gguf
