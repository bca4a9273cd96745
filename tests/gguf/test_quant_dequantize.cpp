// Dequantization of hand-built blocks whose expected values were worked out by hand from the
// ggml layouts, so a mistake in an index or a shift shows up as a wrong number here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "gguf/dequantize.h"
#include "gguf/quant_blocks.h"
#include "gguf/quant_k_scales.h"
#include "common/expect_error.h"

namespace cellm::gguf {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;
constexpr uint16_t kHalfTwo = 0x4000;
constexpr uint16_t kHalfHalf = 0x3800;
constexpr uint16_t kHalfQuarter = 0x3400;
constexpr uint16_t kHalfMinusTwo = 0xC000;

template <typename Block>
std::vector<float> decode(DType type, const Block& block, int elements) {
  std::vector<float> out(static_cast<size_t>(elements));
  dequantize_row(type, &block, out.data(), elements);
  return out;
}

TEST(Dequantize, BlockStructsMatchTheDtypeTable) {
  int visited = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto info = dtype_info(id);
    if (!info) continue;
    visit_block_type(info->type, [&]<typename Block>(std::type_identity<Block>) {
      ++visited;
      EXPECT_EQ(Block::kType, info->type);
      EXPECT_EQ(sizeof(Block), info->block_bytes) << info->name;
      EXPECT_EQ(static_cast<uint32_t>(Block::kElements), info->block_size) << info->name;
    });
  }
  EXPECT_EQ(visited, 9);  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K
}

// Scales {1,2,3,4,5,6,7,63}, mins {0,1,2,3,4,5,6,40}, packed by hand.
constexpr uint8_t kPackedScales[12] = {0x01, 0x02, 0x03, 0xC4, 0x00, 0x01, 0x02, 0x83, 0x45, 0x56, 0x67, 0x8F};
constexpr uint8_t kScales[8] = {1, 2, 3, 4, 5, 6, 7, 63};
constexpr uint8_t kMins[8] = {0, 1, 2, 3, 4, 5, 6, 40};

TEST(Dequantize, KScalesUnpackAndPackByTheLayout) {
  for (int s = 0; s < 8; ++s) {
    const KScaleMin sm = unpack_k_scale_min(kPackedScales, s);
    EXPECT_EQ(sm.scale, kScales[s]) << "sub-block " << s;
    EXPECT_EQ(sm.min, kMins[s]) << "sub-block " << s;
  }
  uint8_t packed[12];
  pack_k_scale_min(kScales, kMins, packed);
  EXPECT_EQ(std::memcmp(packed, kPackedScales, 12), 0);
}

TEST(Dequantize, Q8_0MultipliesBySigned8BitLevels) {
  BlockQ8_0 block{};
  block.d = kHalfHalf;
  block.qs[0] = -128;
  block.qs[1] = 127;
  block.qs[31] = -3;
  const auto y = decode(DType::Q8_0, block, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], 63.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[31], -1.5f);
}

TEST(Dequantize, Q4_0PutsLowNibblesFirst) {
  BlockQ4_0 block{};
  block.d = kHalfTwo;
  std::memset(block.qs, 0x88, sizeof block.qs);  // level 8 = zero
  block.qs[0] = 0x3F;
  block.qs[15] = 0x07;
  const auto y = decode(DType::Q4_0, block, 32);
  EXPECT_EQ(y[0], 14.0f);    // 2 * (15 - 8)
  EXPECT_EQ(y[16], -10.0f);  // 2 * (3 - 8)
  EXPECT_EQ(y[15], -2.0f);   // 2 * (7 - 8)
  EXPECT_EQ(y[31], -16.0f);  // 2 * (0 - 8)
  EXPECT_EQ(y[5], 0.0f);
}

TEST(Dequantize, Q4_1AddsTheMin) {
  BlockQ4_1 block{};
  block.d = kHalfOne;
  block.m = kHalfMinusTwo;
  block.qs[0] = 0xF1;
  block.qs[9] = 0x40;
  const auto y = decode(DType::Q4_1, block, 32);
  EXPECT_EQ(y[0], -1.0f);   // 1 - 2
  EXPECT_EQ(y[16], 13.0f);  // 15 - 2
  EXPECT_EQ(y[9], -2.0f);
  EXPECT_EQ(y[25], 2.0f);
}

TEST(Dequantize, Q5_0TakesTheFifthBitFromQh) {
  BlockQ5_0 block{};
  block.d = kHalfOne;
  block.qh[0] = 0x01;  // element 0
  block.qh[3] = 0x80;  // element 31
  block.qs[0] = 0x52;
  block.qs[15] = 0xF0;
  const auto y = decode(DType::Q5_0, block, 32);
  EXPECT_EQ(y[0], 2.0f);    // (2 | 16) - 16
  EXPECT_EQ(y[16], -11.0f);  // 5 - 16
  EXPECT_EQ(y[15], -16.0f);  // 0 - 16
  EXPECT_EQ(y[31], 15.0f);   // (15 | 16) - 16
}

TEST(Dequantize, Q5_1AddsTheMinToFiveBitLevels) {
  BlockQ5_1 block{};
  block.d = kHalfHalf;
  block.m = kHalfOne;
  block.qh[2] = 0x04;  // element 18
  block.qs[2] = 0x3A;
  const auto y = decode(DType::Q5_1, block, 32);
  EXPECT_EQ(y[2], 6.0f);    // 0.5 * 10 + 1
  EXPECT_EQ(y[18], 10.5f);  // 0.5 * (3 | 16) + 1
  EXPECT_EQ(y[0], 1.0f);
}

TEST(Dequantize, Q4_KScalesSubBlocksAndSubtractsMins) {
  BlockQ4_K block{};
  block.d = kHalfOne;
  block.dmin = kHalfHalf;
  std::memcpy(block.scales, kPackedScales, 12);
  block.qs[0] = 0x21;       // sub-blocks 0 and 1, element 0: levels 1 and 2
  block.qs[32 + 5] = 0xF7;  // sub-blocks 2 and 3, element 5: levels 7 and 15
  block.qs[127] = 0x9A;     // sub-blocks 6 and 7, element 31: levels 10 and 9
  const auto y = decode(DType::Q4_K, block, 256);
  EXPECT_EQ(y[0], 1.0f);          // 1*1 - 0.5*0
  EXPECT_EQ(y[32], 3.5f);         // 2*2 - 0.5*1
  EXPECT_EQ(y[64 + 5], 20.0f);    // 3*7 - 0.5*2
  EXPECT_EQ(y[96 + 5], 58.5f);    // 4*15 - 0.5*3
  EXPECT_EQ(y[192 + 31], 67.0f);  // 7*10 - 0.5*6
  EXPECT_EQ(y[224 + 31], 547.0f);  // 63*9 - 0.5*40
  EXPECT_EQ(y[33], -0.5f);        // level 0 of sub-block 1
  EXPECT_EQ(y[230], -20.0f);      // level 0 of sub-block 7
}

TEST(Dequantize, Q5_KTakesBitSOfQhForSubBlockS) {
  BlockQ5_K block{};
  block.d = kHalfOne;
  block.dmin = kHalfHalf;
  std::memcpy(block.scales, kPackedScales, 12);
  block.qs[32 + 5] = 0xF7;
  block.qh[5] = 0x08;   // sub-block 3, element 5
  block.qh[31] = 0x80;  // sub-block 7, element 31
  const auto y = decode(DType::Q5_K, block, 256);
  EXPECT_EQ(y[64 + 5], 20.0f);      // 3*7 - 1
  EXPECT_EQ(y[96 + 5], 122.5f);     // 4*(15 | 16) - 1.5
  EXPECT_EQ(y[224 + 31], 988.0f);   // 63*16 - 20
  EXPECT_EQ(y[224 + 30], -20.0f);
}

TEST(Dequantize, Q6_KCombinesLowNibblesHighBitsAndSignedScales) {
  BlockQ6_K block{};
  block.d = kHalfQuarter;
  for (int g = 0; g < 15; ++g) block.scales[g] = static_cast<int8_t>(g - 8);
  block.scales[15] = 127;
  block.ql[0] = 0x3A;    // element 0 low nibble 10, element 64 low nibble 3
  block.qh[0] = 0xE4;    // high bits: element 0 -> 0, 32 -> 1, 64 -> 2, 96 -> 3
  block.ql[127] = 0xF0;  // element 255 low nibble 15
  block.qh[63] = 0xC0;   // element 255 high bits 3
  const auto y = decode(DType::Q6_K, block, 256);
  EXPECT_EQ(y[0], 44.0f);     // 0.25 * -8 * (10 - 32)
  EXPECT_EQ(y[32], 24.0f);    // 0.25 * -6 * (16 - 32)
  EXPECT_EQ(y[64], -3.0f);    // 0.25 * -4 * (35 - 32)
  EXPECT_EQ(y[96], -8.0f);    // 0.25 * -2 * (48 - 32)
  EXPECT_EQ(y[255], 984.25f);  // 0.25 * 127 * (63 - 32)
  EXPECT_EQ(y[1], 64.0f);     // 0.25 * -8 * (0 - 32)
  EXPECT_EQ(y[17], 56.0f);    // 0.25 * -7 * (0 - 32)
}

TEST(Dequantize, Q8_KMultipliesByAFloatScale) {
  BlockQ8_K block{};
  block.d = 0.5f;
  block.qs[3] = -4;
  block.qs[255] = 127;
  const auto y = decode(DType::Q8_K, block, 256);
  EXPECT_EQ(y[3], -2.0f);
  EXPECT_EQ(y[255], 63.5f);
}

TEST(Dequantize, HalfFloatsWidenExactly) {
  const uint16_t f16[4] = {0x3C00, 0xC000, 0x0001, 0x7C00};
  float y[4];
  dequantize_row(DType::F16, f16, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(y[3], std::numeric_limits<float>::infinity());
  const uint16_t bf16[2] = {0x3F80, 0xC040};
  dequantize_row(DType::BF16, bf16, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
}

TEST(Dequantize, RowsOfSeveralBlocksDecodeBlockByBlock) {
  BlockQ8_0 blocks[3]{};
  for (int b = 0; b < 3; ++b) {
    blocks[b].d = kHalfOne;
    blocks[b].qs[7] = static_cast<int8_t>(b + 1);
  }
  std::vector<float> y(96);
  dequantize_row(DType::Q8_0, blocks, y.data(), 96);
  EXPECT_EQ(y[7], 1.0f);
  EXPECT_EQ(y[32 + 7], 2.0f);
  EXPECT_EQ(y[64 + 7], 3.0f);
}

TEST(Dequantize, RefusesPartialBlocksAndUnsupportedTypes) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(512);
  expect_error(ErrorCode::InvalidArgument, "q4_K", [&] { dequantize_row(DType::Q4_K, bytes.data(), out.data(), 255); });
  expect_error(ErrorCode::InvalidArgument, "q8_0", [&] { dequantize_row(DType::Q8_0, bytes.data(), out.data(), 33); });
  expect_error(ErrorCode::Unsupported, "q2_K", [&] { dequantize_row(DType::Q2_K, bytes.data(), out.data(), 256); });
  EXPECT_FALSE(can_dequantize(DType::I32));
  EXPECT_TRUE(can_dequantize(DType::Q6_K));
}

}  // namespace
}  // namespace cellm::gguf
