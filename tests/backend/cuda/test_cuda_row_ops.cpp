// The row kernels of the CUDA backend against the CPU backend on random inputs: embed (every
// weight format, bit-exact), rms_norm, add, glu, gather_rows, argmax_rows, rope, kv_store; and
// rope_kv_store against the two calls it fuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/half.h"
#include "cuda_test_support.h"

namespace cellm::cuda::testing {
namespace {

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, float rel, float abs,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!(std::fabs(gpu[i] - cpu[i]) <= abs + rel * std::fabs(cpu[i]))) {
      if (++bad <= 5) ADD_FAILURE() << what << ": element " << i << " gpu " << gpu[i] << " cpu " << cpu[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(CudaRowOps, EmbedEqualsCpuBitForBitInEveryFormat) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t vocab = 37, cols = 512;
  const Rows table_f32 = random_rows(vocab, cols, 11);
  const std::vector<int32_t> tokens = {0, 36, 5, 5, 17, 2, 30};
  const auto T = static_cast<int64_t>(tokens.size());
  DeviceBuffer d_tokens(gpu, tokens);
  for (DType type : weight_formats()) {
    for (float scale : {1.0f, 24.0f}) {
      HostWeight w = quantized_weight(type, table_f32);
      const TensorRef placed = gpu.place_weight(w.ref(), "table");
      Rows cpu_out(T, cols);
      cpu_backend().embed(w.ref(), tokens.data(), scale, cpu_out.host_ref());
      DeviceBuffer d_out(gpu, static_cast<size_t>(T * cols) * sizeof(float));
      gpu.embed(placed, d_tokens.as<int32_t>(), scale, Rows::device_ref(d_out, T, cols));
      const auto got = d_out.download<float>(static_cast<size_t>(T * cols));
      EXPECT_EQ(std::memcmp(got.data(), cpu_out.values.data(), got.size() * sizeof(float)), 0)
          << dtype_name(type) << " scale " << scale;
      gpu.release(placed.data);
    }
  }
}

TEST(CudaRowOps, EmbedOfATokenOutsideTheTableIsAZeroRow) {
  CELLM_REQUIRE_GPU(gpu);
  HostWeight w = quantized_weight(DType::Q8_0, random_rows(4, 64, 3));
  const TensorRef placed = gpu.place_weight(w.ref(), "table");
  DeviceBuffer d_tokens(gpu, std::vector<int32_t>{1, 4, -1});
  DeviceBuffer d_out(gpu, 3 * 64 * sizeof(float));
  gpu.embed(placed, d_tokens.as<int32_t>(), 1.0f, Rows::device_ref(d_out, 3, 64));
  const auto got = d_out.download<float>(3 * 64);
  EXPECT_NE(got[0], 0.0f);
  for (int i = 64; i < 3 * 64; ++i) ASSERT_EQ(got[i], 0.0f) << i;
  gpu.release(placed.data);
}

TEST(CudaRowOps, RmsNormMatchesCpuWholeRowsAndGroups) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t T = 5, cols = 576;
  Rows x = random_rows(T, cols, 21, 3.0f);
  for (int32_t group : {576, 64, 192}) {
    const std::vector<float> weight = random_floats(static_cast<size_t>(group), 22);
    Rows cpu_out(T, cols);
    cpu_backend().rms_norm(x.host_ref(), weight.data(), group, 1e-6f, cpu_out.host_ref());
    DeviceBuffer d_x(gpu, x.values), d_w(gpu, weight), d_out(gpu, x.values.size() * sizeof(float));
    gpu.rms_norm(Rows::device_ref(d_x, T, cols), d_w.as<float>(), group, 1e-6f, Rows::device_ref(d_out, T, cols));
    // The CPU's operations in the CPU's order: the same bits (a last-bit difference would change
    // activation codes downstream).
    EXPECT_EQ(std::memcmp(d_out.download<float>(x.values.size()).data(), cpu_out.values.data(),
                          x.values.size() * sizeof(float)),
              0)
        << "rms_norm group " << group;
  }
}

TEST(CudaRowOps, AddAndGluMatchCpu) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t T = 7, cols = 1000;  // not a multiple of the block width
  Rows a = random_rows(T, cols, 31, 2.0f), b = random_rows(T, cols, 32, 2.0f);
  DeviceBuffer d_a(gpu, a.values), d_b(gpu, b.values), d_out(gpu, a.values.size() * sizeof(float));
  const TensorRef ga = Rows::device_ref(d_a, T, cols), gb = Rows::device_ref(d_b, T, cols),
                  gout = Rows::device_ref(d_out, T, cols);
  Rows cpu_out(T, cols);
  cpu_backend().add(a.host_ref(), b.host_ref(), cpu_out.host_ref());
  gpu.add(ga, gb, gout);
  expect_close(d_out.download<float>(a.values.size()), cpu_out.values, 0.0f, 0.0f, "add");
  for (auto act : {backend::GluActivation::Silu, backend::GluActivation::GeluTanh}) {
    cpu_backend().glu(a.host_ref(), b.host_ref(), act, cpu_out.host_ref());
    gpu.glu(ga, gb, act, gout);
    const std::vector<float> got = d_out.download<float>(a.values.size());
    const char* name = act == backend::GluActivation::Silu ? "silu" : "gelu_tanh";
    expect_close(got, cpu_out.values, 2e-6f, 1e-6f, name);
    // glibc's expf and tanhf on the device: the CPU's bits where the host libm is glibc.
    size_t same = 0;
    for (size_t i = 0; i < got.size(); ++i) same += std::memcmp(&got[i], &cpu_out.values[i], sizeof(float)) == 0;
    std::printf("[ info ] %s: %zu of %zu outputs bit-identical to the CPU\n", name, same, got.size());
#if defined(__GLIBC__)
    EXPECT_EQ(same, got.size()) << name;
#endif
  }
}

TEST(CudaRowOps, GatherRowsCopiesTheListedRows) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t T = 9, cols = 48;
  Rows x = random_rows(T, cols, 41);
  const std::vector<int32_t> rows = {8, 0, 3, 3};
  DeviceBuffer d_x(gpu, x.values), d_rows(gpu, rows), d_out(gpu, rows.size() * cols * sizeof(float));
  gpu.gather_rows(Rows::device_ref(d_x, T, cols), d_rows.as<int32_t>(),
                  Rows::device_ref(d_out, static_cast<int64_t>(rows.size()), cols));
  const auto got = d_out.download<float>(rows.size() * cols);
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(std::memcmp(got.data() + i * cols, x.row(rows[i]), cols * sizeof(float)), 0) << i;
}

// 70004 columns: every row 16-byte aligned, read four at a time; 70001: rows 1..3 are not, and
// each row ends in a column past the last four.
TEST(CudaRowOps, ArgmaxTakesTheLowestIndexAmongEquals) {
  CELLM_REQUIRE_GPU(gpu);
  for (const int64_t cols : {70004, 70001}) {
    const int64_t rows = 5;
    Rows logits = random_rows(rows, cols, 51);
    logits.row(1)[123] = 50.0f;
    logits.row(1)[69999] = 50.0f;        // a tie: the lower index wins
    logits.row(2)[cols - 1] = 99.0f;     // the last column
    for (int64_t i = 0; i < cols; ++i) logits.row(3)[i] = -1.0f;  // all equal: index 0
    logits.row(4)[0] = NAN;              // NaNs never win
    logits.row(4)[77] = 1e30f;
    logits.row(4)[78] = NAN;
    std::vector<int32_t> cpu_out(rows);
    cpu_backend().argmax_rows(logits.host_ref(), cpu_out.data());
    DeviceBuffer d_logits(gpu, logits.values), d_out(gpu, rows * sizeof(int32_t));
    // Twice: a row's parts (argmax.cu) count themselves in again at the second launch.
    for (int launch = 0; launch < 2; ++launch) {
      gpu.argmax_rows(Rows::device_ref(d_logits, rows, cols), d_out.as<int32_t>());
      EXPECT_EQ(d_out.download<int32_t>(rows), cpu_out) << cols << " columns, launch " << launch;
    }
    EXPECT_EQ(cpu_out[1], 123);
    EXPECT_EQ(cpu_out[2], cols - 1);
    EXPECT_EQ(cpu_out[3], 0);
    EXPECT_EQ(cpu_out[4], 77);
  }
}

// More rows than argmax.cu splits (a block per row then), and rows of one part.
TEST(CudaRowOps, ArgmaxOfManyRowsAndOfShortRows) {
  CELLM_REQUIRE_GPU(gpu);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{300, 5000}, {7, 1000}, {3, 4097}}) {
    Rows logits = random_rows(rows, cols, 53);
    logits.row(rows - 1)[cols - 1] = 77.0f;
    std::vector<int32_t> cpu_out(rows);
    cpu_backend().argmax_rows(logits.host_ref(), cpu_out.data());
    DeviceBuffer d_logits(gpu, logits.values), d_out(gpu, rows * sizeof(int32_t));
    gpu.argmax_rows(Rows::device_ref(d_logits, rows, cols), d_out.as<int32_t>());
    EXPECT_EQ(d_out.download<int32_t>(rows), cpu_out) << rows << " x " << cols;
    EXPECT_EQ(cpu_out[rows - 1], cols - 1);
  }
}

TEST(CudaRowOps, RopeMatchesCpuInBothLayouts) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t T = 6;
  const std::vector<int32_t> positions = {0, 1, 7, 511, 4096, 30000};
  DeviceBuffer d_pos(gpu, positions);
  struct Case {
    backend::RopeParams params;
    const char* name;
  };
  const Case cases[] = {
      {{9, 64, 64, 100000.0f, 1.0f, backend::RopeLayout::Interleaved}, "llama interleaved"},
      {{4, 256, 256, 1000000.0f, 1.0f, backend::RopeLayout::Neox}, "gemma neox"},
      {{2, 128, 64, 10000.0f, 0.25f, backend::RopeLayout::Neox}, "partial rotary, linear scaling"},
  };
  for (const Case& c : cases) {
    const int64_t cols = int64_t{c.params.n_heads} * c.params.head_dim;
    Rows x = random_rows(T, cols, 61);
    DeviceBuffer d_x(gpu, x.values);
    cpu_backend().rope(x.host_ref(), positions.data(), c.params);
    gpu.rope(Rows::device_ref(d_x, T, cols), d_pos.as<int32_t>(), c.params);
    // Positions the host-built table covers rotate with the CPU's bits; beyond it (30000) the
    // device's sin/cos may differ in the last bit.
    const std::vector<float> got = d_x.download<float>(x.values.size());
    expect_close(got, x.values, 1e-5f, 2e-6f, c.name);
    EXPECT_EQ(std::memcmp(got.data(), x.values.data(), 5 * cols * sizeof(float)), 0) << c.name;
  }
}

TEST(CudaRowOps, KvStoreWritesTheSameF16BitsAsTheCpu) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t T = 5, cols = 192, pool_rows = 16;
  const size_t row_stride = 2 * cols * 2 + 64;  // K and V of this layer plus another layer's bytes
  Rows k = random_rows(T, cols, 71, 4.0f), v = random_rows(T, cols, 72, 4.0f);
  const std::vector<int32_t> cells = {3, 15, 0, 7, 8};
  std::vector<uint8_t> cpu_pool(pool_rows * row_stride, 0xAB);
  DeviceBuffer d_pool(gpu, cpu_pool), d_k(gpu, k.values), d_v(gpu, v.values), d_cells(gpu, cells);
  const size_t k_offset = 64, v_offset = 64 + cols * 2;
  for (DType dtype : {DType::F16, DType::BF16}) {
    backend::KvDestination cpu_dst{cpu_pool.data() + k_offset, cpu_pool.data() + v_offset, row_stride, dtype,
                                   cells.data()};
    cpu_backend().kv_store(k.host_ref(), v.host_ref(), cpu_dst);
    backend::KvDestination gpu_dst{d_pool.as<uint8_t>() + k_offset, d_pool.as<uint8_t>() + v_offset, row_stride, dtype,
                                   d_cells.as<int32_t>()};
    gpu.kv_store(Rows::device_ref(d_k, T, cols), Rows::device_ref(d_v, T, cols), gpu_dst);
    EXPECT_EQ(d_pool.download<uint8_t>(cpu_pool.size()), cpu_pool) << dtype_name(dtype);
  }
}

// rope_kv_store (one launch where K is whole rotated heads of x) leaves x and the pool with the
// bits of rope then kv_store: both layouts, each plain pool type, a padding row (cell -1) that
// is rotated and not stored, and a partial rotary that takes the two calls.
TEST(CudaRowOps, RopeKvStoreIsRopeThenKvStore) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t T = 4, pool_rows = 8;
  const std::vector<int32_t> positions = {0, 5, 300, 4095}, cells = {6, -1, 0, 3};
  DeviceBuffer d_pos(gpu, positions), d_cells(gpu, cells);
  struct Case {
    backend::RopeParams params;  // n_heads: q and k heads together
    int k_heads;
    const char* name;
  };
  const Case cases[] = {
      {{12, 64, 64, 100000.0f, 1.0f, backend::RopeLayout::Interleaved}, 4, "llama interleaved"},
      {{5, 256, 256, 1000000.0f, 1.0f, backend::RopeLayout::Neox}, 1, "gemma neox"},
      {{6, 128, 64, 10000.0f, 0.25f, backend::RopeLayout::Neox}, 2, "partial rotary (not fused)"},
  };
  for (const Case& c : cases) {
    const int64_t hd = c.params.head_dim, x_cols = int64_t{c.params.n_heads} * hd, kv_cols = c.k_heads * hd;
    const Rows x = random_rows(T, x_cols, 81, 2.0f), v = random_rows(T, kv_cols, 82, 2.0f);
    for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
      const size_t elem = dtype_info(dtype).block_bytes;
      const size_t row_stride = 2 * kv_cols * elem + 32;
      const std::vector<uint8_t> pool(pool_rows * row_stride, 0xCD);
      DeviceBuffer d_x(gpu, x.values), d_x2(gpu, x.values), d_v(gpu, v.values), d_pool(gpu, pool), d_pool2(gpu, pool);
      auto views = [&](DeviceBuffer& dx, DeviceBuffer& dp) {
        const TensorRef xs = Rows::device_ref(dx, T, x_cols);
        TensorRef k = xs;  // the last k_heads heads of x
        k.data = static_cast<char*>(xs.data) + (x_cols - kv_cols) * sizeof(float);
        k.cols = kv_cols;
        const backend::KvDestination dst{dp.as<uint8_t>() + 32, dp.as<uint8_t>() + 32 + kv_cols * elem, row_stride,
                                         dtype, d_cells.as<int32_t>()};
        return std::tuple{xs, k, dst};
      };
      const auto [x1, k1, dst1] = views(d_x, d_pool);
      gpu.rope_kv_store(x1, d_pos.as<int32_t>(), c.params, k1, Rows::device_ref(d_v, T, kv_cols), dst1);
      const auto [x2, k2, dst2] = views(d_x2, d_pool2);
      gpu.rope(x2, d_pos.as<int32_t>(), c.params);
      gpu.kv_store(k2, Rows::device_ref(d_v, T, kv_cols), dst2);
      const std::string what = std::string(c.name) + " " + std::string(dtype_name(dtype));
      EXPECT_EQ(d_x.download<float>(x.values.size()), d_x2.download<float>(x.values.size())) << what;
      const std::vector<uint8_t> fused = d_pool.download<uint8_t>(pool.size());
      EXPECT_EQ(fused, d_pool2.download<uint8_t>(pool.size())) << what;
      EXPECT_NE(fused, pool) << what;  // something was stored
    }
  }
}

}  // namespace
}  // namespace cellm::cuda::testing
