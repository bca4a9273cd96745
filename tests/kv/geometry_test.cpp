#include "kv/geometry.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

TEST(KvGeometry, BytesPerCellSumsKAndVOfEveryLayer) {
  // SmolLM2-135M: 30 layers, 3 KV heads of 64, F16 -> 30 x 2 x 3 x 64 x 2 bytes.
  std::vector<LayerGeometry> layers(30, LayerGeometry{3, 64, 0, DType::F16});
  Geometry g(layers);
  EXPECT_EQ(g.bytes_per_cell(), 30u * 2 * 3 * 64 * 2);
  EXPECT_EQ(g.kv_bytes(0), 3u * 64 * 2);
}

TEST(KvGeometry, OffsetsAreCellMajorLayerByLayer) {
  Geometry g({{2, 8, 0, DType::F16}, {1, 4, 16, DType::F32}, {4, 2, 0, DType::BF16}});
  EXPECT_EQ(g.k_offset(0), 0u);
  EXPECT_EQ(g.v_offset(0), 32u);
  EXPECT_EQ(g.k_offset(1), 64u);
  EXPECT_EQ(g.v_offset(1), 80u);
  EXPECT_EQ(g.k_offset(2), 96u);
  EXPECT_EQ(g.v_offset(2), 112u);
  EXPECT_EQ(g.bytes_per_cell(), 128u);
}

TEST(KvGeometry, DistinctWindowsAscendingWithIndexPerLayer) {
  // Gemma 3 style: five sliding layers of 512 to one global layer.
  std::vector<LayerGeometry> layers;
  for (int l = 0; l < 12; ++l) layers.push_back({1, 256, l % 6 == 5 ? 0 : 512, DType::F16});
  Geometry g(layers);
  ASSERT_EQ(g.windows(), (std::vector<int32_t>{0, 512}));
  EXPECT_EQ(g.window_index(0), 1);
  EXPECT_EQ(g.window_index(5), 0);
  EXPECT_EQ(g.window_index(11), 0);
}

TEST(KvGeometry, SelectWindowRecomputesOffsets) {
  Geometry g({{1, 4, 8, DType::F32}, {1, 4, 0, DType::F32}, {1, 4, 8, DType::F32}});
  Geometry windowed = g.select_window(8);
  EXPECT_EQ(windowed.layer_count(), 2);
  EXPECT_EQ(windowed.bytes_per_cell(), 64u);
  EXPECT_EQ(windowed.k_offset(1), 32u);
  EXPECT_THROW(g.select_window(3), Error);
}

TEST(KvGeometry, MalformedLayersAreRefusedByName) {
  const testing::Thrown refused = testing::thrown_by([] { Geometry({{1, 4, 0, DType::F16}, {0, 4, 0, DType::F16}}); });
  EXPECT_EQ(refused.code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.message.find("layer 1 n_kv_heads"), std::string::npos) << refused.message;
  EXPECT_THROW(Geometry({{1, 4, -1, DType::F16}}), Error);
  EXPECT_THROW(Geometry({{1, 32, 0, DType::Q4_0}}), Error);
  EXPECT_THROW(Geometry(std::vector<LayerGeometry>{}), Error);
}

}  // namespace
}  // namespace cellm::kv
