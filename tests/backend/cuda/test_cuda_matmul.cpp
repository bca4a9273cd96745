// The CUDA matrix product against the CPU backend. The default (exact) path must compute what
// the CPU computes: activations quantized to the same bytes, the same integer block sums and
// the same float steps, so outputs agree to summation-order rounding (1e-5 of sum |w x|) and,
// on CPUs whose matmul runs the AVX-512 kernels (the contract the GPU follows), bit for bit.
// Also: batch invariance for every row count, bias, the opt-in bf16 tensor-core path, real
// weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <deque>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <vector>

#include "../../common/test_models.h"
#include "backend/cpu/quant_activations.h"
#include "backend/cuda/gemm_tile.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/matmul_kernels.h"
#include "core/half.h"
#include "cuda_test_support.h"
#include "gguf/dequantize.h"
#include "gguf/file.h"

namespace cellm::cuda::testing {
namespace {

// out[t][n] in double, and S[t][n] = sum_k |w x| (the scale rounding errors are relative to).
struct Reference {
  std::vector<double> out;
  std::vector<double> magnitude;
};

Reference reference_product(const HostWeight& w, const Rows& x, const std::vector<float>& bias) {
  const int64_t n_rows = w.rows;
  std::vector<float> dense(static_cast<size_t>(w.cols));
  const size_t stride = row_bytes(w.type, w.cols);
  Reference ref{std::vector<double>(static_cast<size_t>(x.rows * n_rows)),
                std::vector<double>(static_cast<size_t>(x.rows * n_rows))};
  for (int64_t n = 0; n < n_rows; ++n) {
    gguf::dequantize_row(w.type, w.bytes.data() + static_cast<size_t>(n) * stride, dense.data(), w.cols);
    for (int64_t t = 0; t < x.rows; ++t) {
      double sum = bias.empty() ? 0.0 : bias[static_cast<size_t>(n)], mag = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double p = static_cast<double>(dense[static_cast<size_t>(k)]) * x.row(t)[k];
        sum += p;
        mag += std::fabs(p);
      }
      ref.out[static_cast<size_t>(t * n_rows + n)] = sum;
      ref.magnitude[static_cast<size_t>(t * n_rows + n)] = mag;
    }
  }
  return ref;
}

// The bf16 tensor-core path rounds both operands to bf16 (2^-9 each).
constexpr double kGemmBound = 4.5e-3;
constexpr double kF32GemmBound = 1e-4;  // cuBLAS's own f32 summation order
// GPU vs CPU on the exact path: the same products, summed in a different order at worst.
constexpr double kExactBound = 1e-5;
// The quantized product against the float reference (activations rounded to 8 bits).
constexpr double kQuantizedBound = 3e-2;

// Worst |got - want| / S; failures name the first few outputs.
double expect_within(const std::vector<float>& got, const std::vector<double>& want,
                     const std::vector<double>& magnitude, double bound, const std::string& what) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err / (magnitude[i] + 1e-30));
    if (!(err <= bound * magnitude[i] + 1e-6) && ++bad <= 3)
      ADD_FAILURE() << what << ": output " << i << " got " << got[i] << " want " << want[i] << " (S " << magnitude[i]
                    << ")";
  }
  EXPECT_EQ(bad, 0u) << what << " (worst error " << worst << " of S)";
  return worst;
}

std::vector<float> gpu_product(CudaBackend& gpu, const TensorRef& placed, const Rows& x, const float* d_bias,
                               bool force_gemm) {
  DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(x.rows * placed.rows) * sizeof(float));
  const TensorRef gx = Rows::device_ref(d_x, x.rows, x.cols), gout = Rows::device_ref(d_out, x.rows, placed.rows);
  if (force_gemm)
    gpu.matmul_gemm(gx, placed, d_bias, gout);
  else
    gpu.matmul(gx, placed, d_bias, gout);
  return d_out.download<float>(static_cast<size_t>(x.rows * placed.rows));
}

std::vector<float> cpu_product(HostWeight& w, const Rows& x, const std::vector<float>& bias) {
  Rows out(x.rows, w.rows);
  cpu_backend().matmul(x.host_ref(), w.ref(), bias.empty() ? nullptr : bias.data(), out.host_ref());
  return out.values;
}

bool cpu_runs_avx512() { return cpu::default_matmul_isa() == cpu::MatmulIsa::Avx512; }

size_t identical(const std::vector<float>& a, const std::vector<float>& b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += std::memcmp(&a[i], &b[i], sizeof(float)) == 0;
  return same;
}

// ---------------------------------------------------------------------------------------------
// Activation quantization: the GPU's bytes are the CPU's.

// Random rows plus rows built to catch rounding: exact .5 ties (scale exactly 1), zeros, huge
// and tiny magnitudes, the largest magnitude twice with both signs, negative maxima.
Rows activation_cases(int64_t cols) {
  Rows x = random_rows(8, cols, 31, 2.0f);
  for (int64_t k = 0; k < cols; ++k) {
    const float tie = static_cast<float>(k % 9) - 4.5f;
    x.row(1)[k] = k % 32 == 0 ? 127.0f : tie;     // Q8_0/Q8_1: amax 127 -> scale 1
    x.row(2)[k] = k % 256 == 0 ? -127.0f : tie;   // Q8_K: first max -127 -> scale 1
    x.row(3)[k] = k % 64 < 32 ? 0.0f : x.row(3)[k];  // all-zero blocks
    x.row(4)[k] *= 1e30f;
    x.row(5)[k] *= 1e-30f;
    x.row(6)[k] = (k % 7 == 3) ? -50.0f : (k % 7 == 5 ? 50.0f : x.row(6)[k]);  // +-max, first negative
    x.row(7)[k] = -std::fabs(x.row(7)[k]);
  }
  return x;
}

TEST(CudaMatmul, QuantizedActivationsAreTheCpuBytes) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t cols = 1024;
  const Rows x = activation_cases(cols);
  DeviceBuffer d_x(gpu, x.values);
  DeviceBuffer d_q(gpu, quantized_activation_bytes(x.rows, cols));
  const QuantizedActivations q = carve_quantized_activations(d_q.data(), x.rows, cols);
  const auto base = reinterpret_cast<uintptr_t>(d_q.data());
  const auto offset = [&](const void* p) { return static_cast<size_t>(reinterpret_cast<uintptr_t>(p) - base); };
  for (auto [format, cpu_format] : {std::pair{ActivationFormat::Q8_0, cpu::ActivationFormat::Q8_0},
                                    std::pair{ActivationFormat::Q8_1, cpu::ActivationFormat::Q8_1},
                                    std::pair{ActivationFormat::Q8_K, cpu::ActivationFormat::Q8_K}}) {
    launch_quantize_activations(Rows::device_ref(d_x, x.rows, cols), format, q, gpu.stream());
    const auto all = d_q.download<uint8_t>(quantized_activation_bytes(x.rows, cols));
    const int64_t blocks = cols / activation_block_elems(format);
    for (int64_t t = 0; t < x.rows; ++t) {
      std::vector<int8_t> codes(cols);
      std::vector<float> d(cols / 32), s(cols / 32);
      std::vector<int16_t> groups(cols / 16);
      cpu::quantize_activation_row(cpu_format, x.row(t), cols, {codes.data(), d.data(), s.data(), groups.data()},
                                   cpu::default_matmul_isa());
      const std::string what = "format " + std::to_string(static_cast<int>(format)) + " row " + std::to_string(t);
      EXPECT_EQ(std::memcmp(all.data() + offset(q.codes) + t * q.row_stride, codes.data(), cols), 0) << what;
      EXPECT_EQ(std::memcmp(all.data() + offset(q.scales) + t * blocks * 4, d.data(), blocks * 4), 0) << what;
      if (format == ActivationFormat::Q8_1) {
        EXPECT_EQ(std::memcmp(all.data() + offset(q.sums) + t * blocks * 4, s.data(), blocks * 4), 0) << what;
      }
      if (format == ActivationFormat::Q8_K) {
        EXPECT_EQ(std::memcmp(all.data() + offset(q.group_sums) + t * cols / 8, groups.data(), cols / 8), 0) << what;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Products.

TEST(CudaMatmul, EveryFormatAndRowCountMatchesTheCpu) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 133, K = 768;  // odd N; K: 3 super-blocks, 24 blocks (a partial step)
  const Rows source = random_rows(N, K, 101, 0.05f);
  for (DType type : weight_formats()) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    double worst = 0;
    size_t same = 0, total = 0;
    for (int64_t T : {1, 2, 3, 5, 8, 16, 17, 64, 300}) {
      const Rows x = random_rows(T, K, static_cast<uint32_t>(200 + T));
      const Reference ref = reference_product(w, x, {});
      const std::vector<float> got = gpu_product(gpu, placed, x, nullptr, false);
      const std::vector<float> cpu = cpu_product(w, x, {});
      const std::vector<double> cpu_d(cpu.begin(), cpu.end());
      const std::string what = std::string(dtype_name(type)) + " T=" + std::to_string(T);
      worst = std::max(worst, expect_within(got, cpu_d, ref.magnitude, kExactBound, what + " vs cpu"));
      expect_within(got, ref.out, ref.magnitude, kQuantizedBound, what + " vs float reference");
      same += identical(got, cpu);
      total += got.size();
    }
    std::printf("[ info ] %-5s GPU vs CPU (%s): max |diff| %.3g of S, %zu of %zu outputs bit-identical\n",
                std::string(dtype_name(type)).c_str(), std::string(cpu::matmul_isa_name(cpu::default_matmul_isa())).c_str(),
                worst, same, total);
    if (cpu_runs_avx512()) {
      EXPECT_EQ(same, total) << dtype_name(type) << ": the GPU follows the AVX-512 sequence";
    }
    gpu.release(placed.data);
  }
}

// The one-token kernel, quantizing its row itself or reading it quantized, spreads a group of
// rows over a block's warps in rounds and loops over groups. A grid sized for one
// multiprocessor gives every block many groups; the widths give one pass per row (K = 256 for
// the k-quants), a partial pass (768: 24 blocks of 32 are one pass and a half), several rounds
// (4096) and more blocks than one load batch of the quantizing prologue (8192). Several rows
// quantized before (2, 3 and 8: a full, a partial and the widest token tile, where the format
// takes that many) share its staged weights.
TEST(CudaMatmul, OneTokenWithManyRowsPerBlockIsTheCpu) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 1001;  // the last group of 8 rows has one
  for (int64_t K : {256, 768, 4096, 8192}) {
    const Rows source = random_rows(N, K, 141, 0.05f);
    for (DType type : weight_formats()) {
      ActivationFormat format;
      if (!activation_format_for(type, format) || K % dtype_info(type).block_size != 0) continue;
      HostWeight w = quantized_weight(type, source);
      const TensorRef placed = gpu.place_weight(w.ref(), "w");
      ASSERT_TRUE(gemv_one_token_supported(placed));
      for (int64_t T : {1, 2, 3, 8}) {
        if (T > gemv_one_token_max_rows(placed)) continue;  // gemv.cu takes those
        const Rows x = random_rows(T, K, 142);
        DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(T * N) * sizeof(float));
        const TensorRef gx = Rows::device_ref(d_x, T, K), gout = Rows::device_ref(d_out, T, N);
        DeviceBuffer d_q(gpu, quantized_activation_bytes(T, K));
        const QuantizedActivations q = carve_quantized_activations(d_q.data(), T, K);
        launch_quantize_activations(gx, format, q, gpu.stream());
        const std::vector<float> cpu = cpu_product(w, x, {});
        const Reference ref = reference_product(w, x, {});
        for (const bool quantized_before : {false, true}) {
          if (!quantized_before && T > 1) continue;  // the kernel quantizes a single row only
          launch_gemv_one_token(gx, quantized_before ? &q : nullptr, placed, nullptr, gout, /*sm_count=*/1,
                                gpu.stream());
          const std::vector<float> got = d_out.download<float>(static_cast<size_t>(T * N));
          const std::string what = std::string(dtype_name(type)) + " K=" + std::to_string(K) + " T=" +
                                   std::to_string(T) +
                                   (quantized_before ? " (quantized before)" : " (quantized by the kernel)");
          expect_within(got, std::vector<double>(cpu.begin(), cpu.end()), ref.magnitude, kExactBound, what);
          if (cpu_runs_avx512()) {
            EXPECT_EQ(identical(got, cpu), got.size()) << what;
          }
        }
      }
      gpu.release(placed.data);
    }
  }
}

const char* set_name(GemmTileSet set) {
  switch (set) {
    case GemmTileSet::Large: return "other formats";
    case GemmTileSet::SmallDirect: return "Q4_K/Q5_K";
    case GemmTileSet::SmallDecoded: return "Q6_K";
  }
  return "?";
}

// The rule picks only tiles gemm_exact.cu has a kernel for (launch_gemm_quantized_tile fails
// with an Internal error on any other), and every kernel is its pick somewhere (none is dead
// weight: Q6_K has the same kernels as Q4_K/Q5_K, the rule picks fewer of them), over
// activation rows from one decode row to prefill chunks, weight rows from a sliver to a
// vocabulary, and GPUs from 1 to 1000 multiprocessors.
TEST(CudaGemmTile, TheRuleChoosesTilesThatHaveKernelsAndEveryOne) {
  for (const GemmTileSet set : {GemmTileSet::Large, GemmTileSet::SmallDirect, GemmTileSet::SmallDecoded}) {
    const std::span<const GemmTile> tiles = gemm_tiles(set);
    std::vector<bool> chosen(tiles.size(), false);
    for (int64_t tokens = 1; tokens <= 600; ++tokens) {
      for (const int64_t rows : {1, 31, 64, 200, 576, 4096, 6144, 28672, 128256}) {
        for (const int sms : {1, 6, 10, 20, 66, 78, 114, 132, 1000}) {
          const GemmTile t = choose_gemm_tile(tokens, rows, sms, set);
          const auto found = std::find(tiles.begin(), tiles.end(), t);
          if (found != tiles.end()) chosen[found - tiles.begin()] = true;
          EXPECT_NE(found, tiles.end()) << set_name(set) << ": no kernel for " << t.activation_rows << " x "
                                        << t.weight_rows << " / " << t.min_blocks << " (tokens " << tokens << ", rows "
                                        << rows << ", " << sms << " SMs)";
        }
      }
    }
    if (set == GemmTileSet::SmallDecoded) continue;
    for (size_t i = 0; i < tiles.size(); ++i)
      EXPECT_TRUE(chosen[i]) << set_name(set) << ": tile " << tiles[i].activation_rows << " x "
                             << tiles[i].weight_rows << " / " << tiles[i].min_blocks << " is never chosen";
  }
}

// The rule on llama3-8b's shapes on an H100's 132 multiprocessors (the figures that chose it
// are in gemm_tile.cpp).
TEST(CudaGemmTile, Llama3_8BShapes) {
  const int sms = 132;
  const GemmTileSet direct = GemmTileSet::SmallDirect, decoded = GemmTileSet::SmallDecoded,
                    large = GemmTileSet::Large;
  // A decode step of 16 sequences: 16-row activation tiles; the 4096-row products would fill
  // 64 of 132 multiprocessors with blocks of 64 weight rows, so they take 32.
  EXPECT_EQ(choose_gemm_tile(16, 4096, sms, direct), (GemmTile{16, 32, 4}));
  EXPECT_EQ(choose_gemm_tile(16, 28672, sms, direct), (GemmTile{16, 64, 2}));
  // 64 sequences: q/k/v's 192 blocks of 32 x 64 would leave 72 multiprocessors idle in their
  // last round, and its 96 blocks of 64 x 64 fit one a multiprocessor; o's 128 blocks of 32 x 64
  // fill one round.
  EXPECT_EQ(choose_gemm_tile(64, 6144, sms, direct), (GemmTile{64, 64, 1}));
  EXPECT_EQ(choose_gemm_tile(40, 6144, sms, direct), (GemmTile{64, 64, 1}));
  EXPECT_EQ(choose_gemm_tile(64, 4096, sms, direct), (GemmTile{32, 64, 1}));
  // 96 sequences: tiles of 64 would pad a third of their rows; 128: q/k/v's 192 blocks of
  // 64 x 64 would leave 72 multiprocessors idle, so 384 of 32 x 64.
  EXPECT_EQ(choose_gemm_tile(96, 6144, sms, direct), (GemmTile{32, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(96, 28672, sms, direct), (GemmTile{32, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(128, 6144, sms, direct), (GemmTile{32, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(128, 28672, sms, direct), (GemmTile{64, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(96, 6144, sms, large), (GemmTile{64, 64, 2}));
  // gate+up's grids are rounds enough: 448 blocks of 64 x 64 at 64 sequences, of 32 x 64 at 32.
  EXPECT_EQ(choose_gemm_tile(64, 28672, sms, direct), (GemmTile{64, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(32, 28672, sms, direct), (GemmTile{32, 64, 2}));
  // Q6_K (the output, ffn_down and attn_v of Q4_K_M files): 32 weight rows, four blocks a
  // multiprocessor, for tiles of 16 and 32 activation rows; the output's 64-row tiles as the rule.
  EXPECT_EQ(choose_gemm_tile(8, 128256, sms, decoded), (GemmTile{16, 32, 4}));
  EXPECT_EQ(choose_gemm_tile(16, 4096, sms, decoded), (GemmTile{16, 32, 4}));
  EXPECT_EQ(choose_gemm_tile(32, 128256, sms, decoded), (GemmTile{32, 32, 4}));
  EXPECT_EQ(choose_gemm_tile(64, 4096, sms, decoded), (GemmTile{32, 32, 4}));
  EXPECT_EQ(choose_gemm_tile(64, 128256, sms, decoded), (GemmTile{64, 64, 2}));
  // Past 64 rows ffn_down's 128 blocks of 64 x 64 nearly fill one round: it takes them, one a
  // multiprocessor, where Q4_K drops to 32-row tiles; attn_v's 32 would not, and keeps 32 x 32.
  EXPECT_EQ(choose_gemm_tile(128, 4096, sms, decoded), (GemmTile{64, 64, 1}));
  EXPECT_EQ(choose_gemm_tile(100, 4096, sms, decoded), (GemmTile{64, 64, 1}));
  EXPECT_EQ(choose_gemm_tile(128, 4096, sms, direct), (GemmTile{32, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(128, 1024, sms, decoded), (GemmTile{32, 32, 4}));
  EXPECT_EQ(choose_gemm_tile(80, 4096, sms, decoded), (GemmTile{32, 32, 4}));
  // Prefill chunks keep the largest tile, for every format.
  for (const int64_t n : {4096, 6144, 14336, 28672})
    for (const GemmTileSet set : {large, direct, decoded})
      EXPECT_EQ(choose_gemm_tile(512, n, sms, set), (GemmTile{64, 64, 2})) << n << " " << set_name(set);
  // Formats other than Q4_K/Q5_K/Q6_K have no 16-row or 32-weight-row tiles.
  EXPECT_EQ(choose_gemm_tile(16, 4096, sms, large), (GemmTile{32, 64, 2}));
  EXPECT_EQ(choose_gemm_tile(64, 6144, sms, large), (GemmTile{32, 64, 2}));
}

// The tensor-core kernel copies steps of 256 elements ahead of the one it multiplies, into a
// ring of stage buffers: a long K wraps the ring several times (11 steps; 12 for the 32-element
// formats, the last of one block), and tiles partial in both weight rows and tokens (200 weight
// rows: the last block of 64 has 8; 13 activation rows: the last of 16 has 13, 40 of 32 has 8).
// Every tile with a kernel runs every case, whichever the rule would pick.
TEST(CudaMatmul, ManyStepsOfTheTensorCoreKernelAreTheCpu) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 200;
  for (DType type : weight_formats()) {
    ActivationFormat format;
    if (!activation_format_for(type, format)) continue;
    const int64_t K = dtype_info(type).block_size == 256 ? 2816 : 2848;
    HostWeight w = quantized_weight(type, random_rows(N, K, 107, 0.05f));
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (const int64_t T : {70, 40, 13}) {
      const Rows x = random_rows(T, K, 108);
      const Reference ref = reference_product(w, x, {});
      const std::vector<float> cpu = cpu_product(w, x, {});
      DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(T * N) * sizeof(float));
      DeviceBuffer d_q(gpu, quantized_activation_bytes(T, K));
      const QuantizedActivations q = carve_quantized_activations(d_q.data(), T, K);
      launch_quantize_activations(Rows::device_ref(d_x, T, K), format, q, gpu.stream());
      for (const GemmTile& tile : gemm_tiles(gemm_tile_set(type))) {
        d_out.fill(0xFF);  // NaN: an output the tile leaves unwritten fails
        launch_gemm_quantized_tile(q, T, placed, nullptr, Rows::device_ref(d_out, T, N), tile, gpu.stream());
        const std::vector<float> got = d_out.download<float>(static_cast<size_t>(T * N));
        const std::string what = std::string(dtype_name(type)) + " K=" + std::to_string(K) + " T=" +
                                 std::to_string(T) + " tile " + std::to_string(tile.activation_rows) + " x " +
                                 std::to_string(tile.weight_rows) + " / " + std::to_string(tile.min_blocks);
        expect_within(got, std::vector<double>(cpu.begin(), cpu.end()), ref.magnitude, kExactBound, what);
        if (cpu_runs_avx512()) {
          EXPECT_EQ(identical(got, cpu), got.size()) << what;
        }
      }
    }
    gpu.release(placed.data);
  }
}

TEST(CudaMatmul, ThirtyTwoElementFormatsWithAPartialStep) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 40, K = 544;  // 17 blocks: one step of 16 and one block
  const Rows source = random_rows(N, K, 105, 0.05f);
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::F16}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    const Rows x = random_rows(5, K, 106);
    const Reference ref = reference_product(w, x, {});
    const std::vector<float> cpu = cpu_product(w, x, {});
    expect_within(gpu_product(gpu, placed, x, nullptr, false), std::vector<double>(cpu.begin(), cpu.end()),
                  ref.magnitude, kExactBound, std::string(dtype_name(type)) + " K=544");
    gpu.release(placed.data);
  }
}

TEST(CudaMatmul, BiasIsAddedLikeTheCpu) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 70, K = 512;
  const Rows source = random_rows(N, K, 111, 0.05f);
  const std::vector<float> bias = random_floats(N, 112);
  DeviceBuffer d_bias(gpu, bias);
  for (DType type : {DType::F32, DType::BF16, DType::Q4_K, DType::Q5_0, DType::Q4_1}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (int64_t T : {1, 5, 40}) {
      const Rows x = random_rows(T, K, static_cast<uint32_t>(300 + T));
      const Reference ref = reference_product(w, x, bias);
      const std::vector<float> cpu = cpu_product(w, x, bias);
      const std::vector<float> got = gpu_product(gpu, placed, x, d_bias.as<float>(), false);
      expect_within(got, std::vector<double>(cpu.begin(), cpu.end()), ref.magnitude, kExactBound,
                    std::string(dtype_name(type)) + " T=" + std::to_string(T) + " +bias");
      if (cpu_runs_avx512()) {
        EXPECT_EQ(identical(got, cpu), got.size()) << dtype_name(type) << " T=" << T;
      }
    }
    gpu.release(placed.data);
  }
}

// matmul_add (the residual added to the product in one op: every product kernel adds it last,
// each output its own residual value, a one-row step's as the product's bias) gives the bits of
// matmul then add, and of the CPU backend's matmul_add. Rows 1-3 take the one-token and
// streaming kernels, 6 those or (Q4_K) the tensor-core kernel, 9 to 70 the tensor-core kernel: 6,
// 9 and 24 in tiles of 16 and 32 rows (the residual asked for right after the wait), 40 and 70 in
// tiles of 64 (asked for at the end, 70 with a partial second tile); the residual's rows are
// padded (its stride is not the output's).
TEST(CudaMatmul, MatmulAddIsMatmulThenAdd) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 70, K = 512, kPad = 6;
  const Rows source = random_rows(N, K, 151, 0.05f);
  for (DType type : {DType::F32, DType::F16, DType::Q4_K, DType::Q6_K, DType::Q4_1, DType::Q8_0}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (int64_t T : {1, 2, 3, 6, 9, 24, 40, 70}) {
      const Rows x = random_rows(T, K, static_cast<uint32_t>(400 + T));
      const Rows padded = random_rows(T, N + kPad, static_cast<uint32_t>(500 + T), 4.0f);
      Rows residual(T, N);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n)
          residual.values[static_cast<size_t>(t * N + n)] = padded.values[static_cast<size_t>(t * (N + kPad) + n)];
      DeviceBuffer d_x(gpu, x.values), d_res(gpu, padded.values);
      DeviceBuffer d_fused(gpu, static_cast<size_t>(T * N) * sizeof(float));
      DeviceBuffer d_apart(gpu, static_cast<size_t>(T * N) * sizeof(float));
      const TensorRef gx = Rows::device_ref(d_x, T, K);
      const TensorRef gres{d_res.data(), DType::F32, T, N, static_cast<size_t>(N + kPad) * sizeof(float)};
      const TensorRef fused = Rows::device_ref(d_fused, T, N), apart = Rows::device_ref(d_apart, T, N);
      gpu.matmul_add(gx, placed, gres, fused);
      gpu.matmul(gx, placed, nullptr, apart);
      gpu.add(gres, apart, apart);
      const std::vector<float> got = d_fused.download<float>(static_cast<size_t>(T * N));
      const std::vector<float> want = d_apart.download<float>(static_cast<size_t>(T * N));
      const std::string what = std::string(dtype_name(type)) + " T=" + std::to_string(T);
      EXPECT_EQ(identical(got, want), got.size()) << what;
      Rows cpu_out(T, N);
      cpu_backend().matmul_add(x.host_ref(), w.ref(), residual.host_ref(), cpu_out.host_ref());
      if (cpu_runs_avx512()) {
        EXPECT_EQ(identical(got, cpu_out.values), got.size()) << what << " vs the CPU";
      }
    }
    gpu.release(placed.data);
  }
}

// The buffers of a fused call (a producer and the product of its output) and of the same calls
// made apart: each side's intermediate rows (T x K) and product (T x N).
struct FusedAndApart {
  FusedAndApart(CudaBackend& gpu, int64_t T, int64_t K, int64_t N)
      : T(T),
        K(K),
        N(N),
        d_mid(gpu, static_cast<size_t>(T * K) * sizeof(float)),
        d_mid_apart(gpu, static_cast<size_t>(T * K) * sizeof(float)),
        d_out(gpu, static_cast<size_t>(T * N) * sizeof(float)),
        d_out_apart(gpu, static_cast<size_t>(T * N) * sizeof(float)) {}
  TensorRef mid() { return Rows::device_ref(d_mid, T, K); }
  TensorRef mid_apart() { return Rows::device_ref(d_mid_apart, T, K); }
  TensorRef out() { return Rows::device_ref(d_out, T, N); }
  TensorRef out_apart() { return Rows::device_ref(d_out_apart, T, N); }
  // The apart side's product of its intermediate rows: matmul, or matmul_add of the residual.
  void multiply_apart(CudaBackend& gpu, const TensorRef& w, const TensorRef* residual) {
    if (residual != nullptr)
      gpu.matmul_add(mid_apart(), w, *residual, out_apart());
    else
      gpu.matmul(mid_apart(), w, nullptr, out_apart());
  }
  // Expects both sides' bits equal; the fused side's intermediate rows and product.
  std::pair<std::vector<float>, std::vector<float>> expect_same(const std::string& what) {
    auto mid = d_mid.download<float>(static_cast<size_t>(T * K));
    auto out = d_out.download<float>(static_cast<size_t>(T * N));
    EXPECT_EQ(identical(mid, d_mid_apart.download<float>(static_cast<size_t>(T * K))), mid.size()) << what;
    EXPECT_EQ(identical(out, d_out_apart.download<float>(static_cast<size_t>(T * N))), out.size()) << what;
    return {std::move(mid), std::move(out)};
  }
  int64_t T, K, N;
  DeviceBuffer d_mid, d_mid_apart, d_out, d_out_apart;
};

// rms_norm_matmul (a whole-row norm and the product of its output; where the product would
// quantize its activations in a launch of their own, the norm's kernel does it) gives the bits
// of rms_norm then matmul, for the normalized rows and the product, and the CPU's. K = 4352 is
// past the one-row product's own quantization, and 17 Q8_K (136 32-value) blocks leave the last
// of the CTAs a few-row step splits each row over a part of its span; 40 rows are not split.
// K = 256 with one row stays with the product's own quantization.
TEST(CudaMatmul, RmsNormMatmulIsRmsNormThenMatmul) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 40;
  for (int64_t K : {256, 4352}) {
    const Rows source = random_rows(N, K, 161, 0.05f);
    const Rows norm_weight = random_rows(1, K, 162, 1.5f);
    DeviceBuffer d_nw(gpu, norm_weight.values);
    const auto* nw = static_cast<const float*>(d_nw.data());
    for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16}) {
      HostWeight w = quantized_weight(type, source);
      const TensorRef placed = gpu.place_weight(w.ref(), "w");
      for (int64_t T : {1, 3, 40}) {
        const Rows x = random_rows(T, K, static_cast<uint32_t>(600 + T), 3.0f);
        DeviceBuffer d_x(gpu, x.values);
        const TensorRef gx = Rows::device_ref(d_x, T, K);
        FusedAndApart calls(gpu, T, K, N);
        gpu.rms_norm_matmul(gx, nw, 1e-5f, calls.mid(), placed, nullptr, calls.out());
        gpu.rms_norm(gx, nw, static_cast<int32_t>(K), 1e-5f, calls.mid_apart());
        calls.multiply_apart(gpu, placed, nullptr);
        const std::string what = std::string(dtype_name(type)) + " K=" + std::to_string(K) + " T=" + std::to_string(T);
        const auto [got_normed, got] = calls.expect_same(what);
        Rows cpu_normed(T, K), cpu_out(T, N);
        cpu_backend().rms_norm_matmul(x.host_ref(), norm_weight.values.data(), 1e-5f, cpu_normed.host_ref(), w.ref(),
                                      nullptr, cpu_out.host_ref());
        EXPECT_EQ(identical(got_normed, cpu_normed.values), got_normed.size()) << what << " vs the CPU";
        if (cpu_runs_avx512()) {
          EXPECT_EQ(identical(got, cpu_out.values), got.size()) << what << " vs the CPU";
        }
      }
      gpu.release(placed.data);
    }
  }
}

// glu_matmul (the gated activation and the product of its output, with or without the residual
// of matmul_add; where the product would quantize its activations in a launch of their own, the
// GLU's kernel does it) gives the bits of glu then matmul (or matmul_add), and the CPU's.
TEST(CudaMatmul, GluMatmulIsGluThenMatmul) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 40;
  for (int64_t K : {256, 4096}) {
    const Rows source = random_rows(N, K, 171, 0.05f);
    for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16}) {
      HostWeight w = quantized_weight(type, source);
      const TensorRef placed = gpu.place_weight(w.ref(), "w");
      for (int64_t T : {1, 3, 9}) {
        for (backend::GluActivation act : {backend::GluActivation::Silu, backend::GluActivation::GeluTanh}) {
          for (bool adds : {false, true}) {
            const Rows gate = random_rows(T, K, static_cast<uint32_t>(700 + T), 3.0f);
            const Rows up = random_rows(T, K, static_cast<uint32_t>(800 + T), 2.0f);
            const Rows residual = random_rows(T, N, static_cast<uint32_t>(900 + T), 4.0f);
            DeviceBuffer d_gate(gpu, gate.values), d_up(gpu, up.values), d_res(gpu, residual.values);
            const TensorRef g = Rows::device_ref(d_gate, T, K), u = Rows::device_ref(d_up, T, K);
            const TensorRef res = Rows::device_ref(d_res, T, N);
            FusedAndApart calls(gpu, T, K, N);
            gpu.glu_matmul(g, u, act, calls.mid(), placed, nullptr, adds ? &res : nullptr, calls.out());
            gpu.glu(g, u, act, calls.mid_apart());
            calls.multiply_apart(gpu, placed, adds ? &res : nullptr);
            const std::string what = std::string(dtype_name(type)) + " K=" + std::to_string(K) + " T=" +
                                     std::to_string(T) + (adds ? " +residual" : "") +
                                     (act == backend::GluActivation::Silu ? " silu" : " gelu");
            const auto got = calls.expect_same(what).second;
            if (cpu_runs_avx512()) {
              Rows cpu_glu(T, K), cpu_out(T, N);
              const TensorRef cpu_res = residual.host_ref();
              cpu_backend().glu_matmul(gate.host_ref(), up.host_ref(), act, cpu_glu.host_ref(), w.ref(), nullptr,
                                       adds ? &cpu_res : nullptr, cpu_out.host_ref());
              EXPECT_EQ(identical(got, cpu_out.values), got.size()) << what << " vs the CPU";
            }
          }
        }
      }
      gpu.release(placed.data);
    }
  }
}

// attention_matmul (attention and the product of its output, with or without the residual of
// matmul_add; where the product would quantize its activations in a launch of their own, the
// attention blocks that write the output do it) gives the bits of attention then matmul (or
// matmul_add): eager, captured in a graph (one row: the product quantizes apart there) and for
// three rows. llama3-like heads: 2 KV heads of 128, 4 query heads each, over 300 cells of an f16
// pool in pages of 16 (the last page part free).
TEST(CudaMatmul, AttentionMatmulIsAttentionThenMatmul) {
  CELLM_REQUIRE_GPU(gpu);
  constexpr int32_t kKvHeads = 2, kHeadDim = 128, kGroup = 4, kPage = 16, kCells = 300;
  constexpr int32_t kPages = (kCells + kPage - 1) / kPage;
  const int64_t K = int64_t{kKvHeads} * kGroup * kHeadDim, N = 48;
  const size_t kv_bytes = size_t{kKvHeads} * kHeadDim * sizeof(uint16_t);
  const size_t row_stride = 2 * kv_bytes;  // a cell's K then its V
  const Rows pool_values = random_rows(int64_t{kPages} * kPage, 2 * kKvHeads * kHeadDim, 191);
  std::vector<uint16_t> pool(pool_values.values.size());
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = fp32_to_fp16(pool_values.values[i]);
  std::vector<int32_t> cell_pos(static_cast<size_t>(kPages) * kPage, INT32_MAX);  // free: seen by no row
  for (int32_t c = 0; c < kCells; ++c) cell_pos[static_cast<size_t>(c)] = c;
  DeviceBuffer d_pool(gpu, pool), d_cell_pos(gpu, cell_pos);
  const Rows source = random_rows(N, K, 192, 0.05f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (DType type : {DType::Q4_K, DType::Q4_1, DType::Q8_0}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (int64_t T : {1, 3}) {
      // Every row reads the whole page list, at the last T positions.
      std::vector<int32_t> page_rows, pages, positions;
      for (int64_t t = 0; t <= T; ++t) page_rows.push_back(static_cast<int32_t>(t * kPages));
      for (int64_t t = 0; t < T; ++t) {
        for (int32_t p = 0; p < kPages; ++p) pages.push_back(p);
        positions.push_back(static_cast<int32_t>(kCells - T + t));
      }
      DeviceBuffer d_page_rows(gpu, page_rows), d_pages(gpu, pages), d_pos(gpu, positions);
      const backend::PagedKv kv{d_pool.data(), static_cast<const char*>(d_pool.data()) + kv_bytes, row_stride,
                                DType::F16, kKvHeads, kHeadDim, 0, kPage, d_cell_pos.as<int32_t>(),
                                d_page_rows.as<int32_t>(), d_pages.as<int32_t>()};
      const Rows q = random_rows(T, K, static_cast<uint32_t>(193 + T), 2.0f);
      const Rows residual = random_rows(T, N, static_cast<uint32_t>(197 + T), 4.0f);
      DeviceBuffer d_q(gpu, q.values), d_res(gpu, residual.values);
      const TensorRef gq = Rows::device_ref(d_q, T, K), res = Rows::device_ref(d_res, T, N);
      for (bool captured : {false, true}) {
        if (captured && T != 1) continue;
        for (bool adds : {false, true}) {
          FusedAndApart calls(gpu, T, K, N);
          gpu.attention(gq, kv, d_pos.as<int32_t>(), scale, calls.mid_apart());
          calls.multiply_apart(gpu, placed, adds ? &res : nullptr);
          auto fused = [&] {
            gpu.attention_matmul(gq, kv, d_pos.as<int32_t>(), scale, calls.mid(), placed, nullptr,
                                 adds ? &res : nullptr, calls.out());
          };
          if (captured) {
            gpu.synchronize();
            gpu.begin_capture();
            fused();
            const std::unique_ptr<backend::Graph> graph = gpu.end_capture();
            graph->launch();
            gpu.synchronize();
          } else {
            fused();
          }
          calls.expect_same(std::string(dtype_name(type)) + " T=" + std::to_string(T) +
                            (captured ? " captured" : " eager") + (adds ? " +residual" : ""));
        }
      }
    }
    gpu.release(placed.data);
  }
}

// A one-row product made while a CUDA graph is captured quantizes its row apart (or in the norm or
// GLU kernel before it), where the same call made eagerly quantizes it in the product kernel
// (K <= kGemvQuantizeMaxColumns): both give the same bits, for the plain product, the normed
// one and the gated one.
TEST(CudaMatmul, CapturedOneRowProductsAreTheEagerBits) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 40, K = 768;
  static_assert(768 <= kGemvQuantizeMaxColumns);
  const Rows source = random_rows(N, K, 181, 0.05f);
  const Rows x = random_rows(1, K, 182, 3.0f), up_values = random_rows(1, K, 183, 2.0f);
  const Rows norm_weight = random_rows(1, K, 184, 1.5f);
  DeviceBuffer d_x(gpu, x.values), d_up(gpu, up_values.values), d_nw(gpu, norm_weight.values);
  const TensorRef gx = Rows::device_ref(d_x, 1, K), gup = Rows::device_ref(d_up, 1, K);
  const auto* nw = static_cast<const float*>(d_nw.data());
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q4_1, DType::Q8_0}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    // [eager, captured] x [plain, normed, gated] products, and the normed and gated rows.
    std::deque<DeviceBuffer> out, mid;  // DeviceBuffer does not move
    for (int i = 0; i < 6; ++i) out.emplace_back(gpu, static_cast<size_t>(N) * sizeof(float));
    for (int i = 0; i < 4; ++i) mid.emplace_back(gpu, static_cast<size_t>(K) * sizeof(float));
    auto products = [&](int side) {
      auto o = [&](int k) { return Rows::device_ref(out[3 * side + k], 1, N); };
      auto m = [&](int k) { return Rows::device_ref(mid[2 * side + k], 1, K); };
      gpu.matmul(gx, placed, nullptr, o(0));
      gpu.rms_norm_matmul(gx, nw, 1e-5f, m(0), placed, nullptr, o(1));
      gpu.glu_matmul(gx, gup, backend::GluActivation::Silu, m(1), placed, nullptr, nullptr, o(2));
    };
    products(0);
    gpu.synchronize();
    gpu.begin_capture();
    products(1);
    const std::unique_ptr<backend::Graph> graph = gpu.end_capture();
    graph->launch();
    gpu.synchronize();
    for (int k = 0; k < 3; ++k) {
      const auto eager = out[k].download<float>(N), captured = out[3 + k].download<float>(N);
      EXPECT_EQ(identical(eager, captured), eager.size()) << dtype_name(type) << " product " << k;
    }
    for (int k = 0; k < 2; ++k) {
      const auto eager = mid[k].download<float>(K), captured = mid[2 + k].download<float>(K);
      EXPECT_EQ(identical(eager, captured), eager.size()) << dtype_name(type) << " producer " << k;
    }
    gpu.release(placed.data);
  }
}

// Every row count takes the same per-output sequence: a row is the same alone, in a small
// batch or inside a prefill-sized one.
TEST(CudaMatmul, RowsAreTheSameAloneOrInAnyBatch) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 96, K = 1024, T = 37;
  const Rows source = random_rows(N, K, 121, 0.05f);
  const Rows batch = random_rows(T, K, 122);
  for (DType type : weight_formats()) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    const std::vector<float> together = gpu_product(gpu, placed, batch, nullptr, false);
    for (int64_t t0 : {0, 5, 29}) {
      for (int64_t size : {1, 3, 8}) {
        if (t0 + size > T) continue;
        Rows part(size, K);
        std::copy(batch.row(t0), batch.row(t0) + size * K, part.row(0));
        const std::vector<float> alone = gpu_product(gpu, placed, part, nullptr, false);
        EXPECT_EQ(std::memcmp(alone.data(), together.data() + t0 * N, alone.size() * sizeof(float)), 0)
            << dtype_name(type) << ": rows " << t0 << ".." << t0 + size - 1 << " alone vs in a batch of " << T;
      }
    }
    gpu.release(placed.data);
  }
}

// The opt-in tensor-core path (CELLM_CUDA_GEMM=bf16) stays usable.
TEST(CudaMatmul, Bf16TensorCorePathMatchesTheReference) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 70, K = 512;
  const Rows source = random_rows(N, K, 131, 0.05f);
  const std::vector<float> bias = random_floats(N, 132);
  DeviceBuffer d_bias(gpu, bias);
  for (DType type : {DType::F32, DType::BF16, DType::Q4_K, DType::Q5_0}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (int64_t T : {1, 40}) {
      const Rows x = random_rows(T, K, static_cast<uint32_t>(330 + T));
      const Reference ref = reference_product(w, x, bias);
      expect_within(gpu_product(gpu, placed, x, d_bias.as<float>(), true), ref.out, ref.magnitude,
                    type == DType::F32 ? kF32GemmBound : kGemmBound,
                    std::string(dtype_name(type)) + " T=" + std::to_string(T) + " bf16 gemm+bias");
    }
    gpu.release(placed.data);
  }
}

// Real weights: a slice of the first tensor of each format in the default models, and every
// 2-D tensor of the GGUF named by CELLM_CUDA_WEIGHT_SAMPLES (a file of real tensors small
// enough to take to a GPU machine).
TEST(CudaMatmul, RealWeightsMatchTheCpu) {
  CELLM_REQUIRE_GPU(gpu);
  std::vector<std::string> files;
  for (const char* model : {test::kSmolLM2, test::kGemma3})
    if (std::filesystem::exists(test::model_path(model))) files.push_back(test::model_path(model));
  if (const char* samples = std::getenv("CELLM_CUDA_WEIGHT_SAMPLES")) files.push_back(samples);
  if (files.empty()) GTEST_SKIP() << "no default models and no CELLM_CUDA_WEIGHT_SAMPLES file";
  int checked = 0;
  for (const std::string& path : files) {
    auto file = gguf::File::open(path);
    std::vector<DType> seen;
    for (const gguf::TensorInfo& t : file->tensors()) {
      if (t.dims.size() != 2 || !dtype_info(t.type).weight_format) continue;
      if (std::find(seen.begin(), seen.end(), t.type) != seen.end()) continue;
      seen.push_back(t.type);
      const int64_t K = t.dims[0], N = std::min<int64_t>(t.dims[1], 512);
      HostWeight w{t.type, N, K, std::vector<uint8_t>(t.data, t.data + row_bytes(t.type, K) * N)};
      const TensorRef placed = gpu.place_weight(w.ref(), t.name);
      for (int64_t T : {1, 5, 33}) {
        const Rows x = random_rows(T, K, static_cast<uint32_t>(400 + T));
        const Reference ref = reference_product(w, x, {});
        const std::vector<float> cpu = cpu_product(w, x, {});
        expect_within(gpu_product(gpu, placed, x, nullptr, false), std::vector<double>(cpu.begin(), cpu.end()),
                      ref.magnitude, kExactBound,
                      path + ": " + t.name + " (" + std::string(dtype_name(t.type)) + ") T=" + std::to_string(T));
      }
      // Embedding rows of the real table equal the reference dequantization exactly.
      const std::vector<int32_t> tokens = {0, static_cast<int32_t>(N - 1), static_cast<int32_t>(std::min<int64_t>(7, N - 1))};
      DeviceBuffer d_tokens(gpu, tokens), d_out(gpu, tokens.size() * K * sizeof(float));
      gpu.embed(placed, d_tokens.as<int32_t>(), 1.0f, Rows::device_ref(d_out, 3, K));
      const auto got = d_out.download<float>(tokens.size() * K);
      std::vector<float> want(static_cast<size_t>(K));
      for (size_t i = 0; i < tokens.size(); ++i) {
        gguf::dequantize_row(t.type, w.bytes.data() + row_bytes(t.type, K) * tokens[i], want.data(), K);
        EXPECT_EQ(std::memcmp(got.data() + i * K, want.data(), K * sizeof(float)), 0) << t.name << " row " << tokens[i];
      }
      gpu.release(placed.data);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  std::printf("[ info ] real-weight formats checked: %d\n", checked);
}

}  // namespace
}  // namespace cellm::cuda::testing
