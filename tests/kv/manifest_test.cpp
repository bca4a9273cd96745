#include "kv/manifest.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/host_storage.h"
#include "kv/pool_bindings.h"

namespace cellm::kv {
namespace {

Geometry two_window_geometry() { return Geometry({{2, 8, 0, DType::F16}, {2, 8, 4, DType::F16}}); }

// Binds every declared tensor as declared (runtime extents set to 7), the way an executor would.
std::vector<BoundTensor> bind_as_declared(const Manifest& m) {
  static int dummy;
  std::vector<BoundTensor> out;
  for (const TensorSpec& s : m.specs()) {
    BoundTensor b{s.name, s.dtype, s.dims, s.row_stride, &dummy};
    for (int64_t& d : b.dims) {
      if (d == kRuntimeExtent) d = 7;
    }
    out.push_back(b);
  }
  return out;
}

std::string error_of(const Manifest& m, const std::vector<BoundTensor>& b, ErrorCode* code) {
  try {
    m.validate(b);
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  return "";
}

TEST(KvManifest, DeclaresPoolsPerLayerAndSideBuffersPerWindow) {
  Manifest m;
  declare_kv_bindings(m, two_window_geometry(), 64, {.dense_masks = true, .page_lists = true});
  const TensorSpec* k1 = m.find("kv.k.1");
  ASSERT_NE(k1, nullptr);
  EXPECT_EQ(k1->dtype, DType::F16);
  EXPECT_EQ(k1->dims, (std::vector<int64_t>{kRuntimeExtent, 2, 8}));
  EXPECT_EQ(k1->row_stride, 2 * 2 * 2 * 8 * 2);
  ASSERT_NE(m.find("kv.v.0"), nullptr);
  EXPECT_EQ(m.find("kv.cells")->dims, (std::vector<int64_t>{64}));
  EXPECT_EQ(m.find("kv.cell_pos")->dtype, DType::I32);
  EXPECT_EQ(m.find("kv.read_len")->dims, (std::vector<int64_t>{1}));
  EXPECT_EQ(m.find("kv.mask.w4")->dims, (std::vector<int64_t>{64, kRuntimeExtent}));
  EXPECT_EQ(m.find("kv.mask.w0")->dtype, DType::I8);
  EXPECT_EQ(m.find("kv.page_rows.w0")->dims, (std::vector<int64_t>{65}));
  EXPECT_NE(m.find("kv.pages.w4"), nullptr);
  EXPECT_EQ(m.specs().size(), 4u + 3u + 2u * 3u);
}

TEST(KvManifest, SideBufferChoiceLeavesOutUnreadOnes) {
  Manifest m;
  declare_kv_bindings(m, two_window_geometry(), 8);
  EXPECT_EQ(m.find("kv.mask.w0"), nullptr);
  EXPECT_NE(m.find("kv.pages.w0"), nullptr);
  EXPECT_THROW(m.declare({"kv.cells", DType::I32, {8}, 0}), Error);
}

TEST(KvManifest, ValidatorAcceptsBindingsAsDeclared) {
  Manifest m;
  declare_kv_bindings(m, two_window_geometry(), 8);
  EXPECT_EQ(m.first_mismatch(bind_as_declared(m)), std::nullopt);
  EXPECT_NO_THROW(m.validate(bind_as_declared(m)));
}

TEST(KvManifest, ValidatorNamesTheFirstMismatch) {
  Manifest m;
  declare_kv_bindings(m, two_window_geometry(), 8);
  ErrorCode code{};

  auto missing = bind_as_declared(m);
  missing.erase(missing.begin() + 2);  // kv.k.1
  EXPECT_EQ(error_of(m, missing, &code), "binding 'kv.k.1' is missing");
  EXPECT_EQ(code, ErrorCode::NotFound);

  auto unbound = bind_as_declared(m);
  unbound[4].data = nullptr;
  EXPECT_NE(error_of(m, unbound, &code).find("'kv.cells' is not bound"), std::string::npos);

  auto wrong_dtype = bind_as_declared(m);
  wrong_dtype[1].dtype = DType::F32;
  EXPECT_EQ(error_of(m, wrong_dtype, &code), "binding 'kv.v.0' has dtype f32, the manifest declares f16");
  EXPECT_EQ(code, ErrorCode::InvalidArgument);

  auto wrong_shape = bind_as_declared(m);
  wrong_shape[0].dims[1] = 3;
  wrong_shape[3].dims[2] = 9;  // a later mismatch is not the one reported
  EXPECT_EQ(error_of(m, wrong_shape, &code), "binding 'kv.k.0' has shape [7, 3, 8], the manifest declares [*, 2, 8]");

  auto wrong_rank = bind_as_declared(m);
  wrong_rank[4].dims.push_back(1);
  EXPECT_NE(error_of(m, wrong_rank, &code).find("'kv.cells' has shape [8, 1]"), std::string::npos);

  auto wrong_stride = bind_as_declared(m);
  wrong_stride[2].row_stride = 32;
  EXPECT_NE(error_of(m, wrong_stride, &code).find("'kv.k.1' has row stride 32"), std::string::npos);

  auto extra = bind_as_declared(m);
  extra.push_back({"kv.celss", DType::I32, {8}, 0, extra[0].data});
  EXPECT_EQ(error_of(m, extra, &code), "binding 'kv.celss' is not declared by the manifest");
}

TEST(KvManifest, PoolBindingsViewTheCellMajorStorage) {
  const Geometry g = two_window_geometry();
  HostStorage storage(g.bytes_per_cell());
  storage.grow(10);
  auto pools = pool_bindings(g, storage);
  ASSERT_EQ(pools.size(), 4u);
  auto* base = static_cast<const std::byte*>(storage.base());
  EXPECT_EQ(pools[3].name, "kv.v.1");
  EXPECT_EQ(pools[3].data, base + g.v_offset(1));
  EXPECT_EQ(pools[3].dims, (std::vector<int64_t>{10, 2, 8}));
  EXPECT_EQ(pools[3].row_stride, static_cast<int64_t>(g.bytes_per_cell()));

  // The pools plus the side buffers satisfy the manifest.
  Manifest m;
  declare_kv_bindings(m, g, 8);
  auto bindings = bind_as_declared(m);
  for (size_t i = 0; i < pools.size(); ++i) bindings[i] = pools[i];
  EXPECT_EQ(m.first_mismatch(bindings), std::nullopt);

  HostStorage wrong(g.bytes_per_cell() + 2);
  EXPECT_THROW(pool_bindings(g, wrong), Error);
}

}  // namespace
}  // namespace cellm::kv
