// Throughput of the default (exact) matrix product at the shapes of Llama-3-8B decode and
// prefill (run with CELLM_CUDA_PERF=1). Prints weight bandwidth and integer/float op rates;
// asserts nothing about time. Weights are random bytes (fp16 fields kept finite) and rotate
// over enough copies that every launch streams them from device memory, not from L2.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <span>

#include "backend/cuda/gemm_tile.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/matmul.h"
#include "cuda_test_support.h"
#include "perf_support.h"

namespace cellm::cuda::testing {
namespace {

// Median milliseconds of one call over several timed batches, after a warm-up.
template <typename Fn>
double median_ms(CudaBackend& gpu, Fn&& fn) {
  fn();
  gpu.synchronize();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto batch = [&](int iters) {
    cudaEventRecord(start, gpu.stream());
    for (int i = 0; i < iters; ++i) fn();
    cudaEventRecord(stop, gpu.stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return static_cast<double>(ms) / iters;
  };
  const double first = batch(3);
  const int iters = static_cast<int>(std::clamp(8.0 / std::max(first, 1e-3), 3.0, 500.0));
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) runs.push_back(batch(iters));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

struct Shape {
  const char* name;
  int64_t n, k;
};

// Random weights of shape s placed on the GPU, and copies of them enough to fill several times
// the L2, for calls to rotate over. Freed by the destructor.
struct RotatingWeights {
  CudaBackend& gpu;
  std::vector<TensorRef> w;
  size_t bytes = 0;  // one copy's
  RotatingWeights(CudaBackend& g, DType type, const Shape& s) : gpu(g) {
    const size_t stride = (row_bytes(type, s.k) + 15) / 16 * 16;
    bytes = stride * static_cast<size_t>(s.n);
    const size_t copies = std::max<size_t>(1, (size_t{320} << 20) / bytes + 1);
    std::vector<uint8_t> host = random_weight_bytes(row_bytes(type, s.k) * static_cast<size_t>(s.n), 7);
    w.push_back(gpu.place_weight({host.data(), type, s.n, s.k, row_bytes(type, s.k)}, "perf"));
    for (size_t c = 1; c < copies; ++c) {
      TensorRef copy = w[0];
      copy.data = gpu.allocate(bytes, "perf copy");
      cudaMemcpyAsync(copy.data, w[0].data, bytes, cudaMemcpyDeviceToDevice, gpu.stream());
      w.push_back(copy);
    }
  }
  ~RotatingWeights() {
    for (size_t c = 1; c < w.size(); ++c) gpu.release(w[c].data);
    gpu.release(w[0].data);
  }
  RotatingWeights(const RotatingWeights&) = delete;
  RotatingWeights& operator=(const RotatingWeights&) = delete;
};

void measure(CudaBackend& gpu, DType type, const Shape& s, const std::vector<int64_t>& row_counts) {
  const RotatingWeights weights(gpu, type, s);
  const std::vector<TensorRef>& w = weights.w;
  const size_t bytes = weights.bytes;
  for (int64_t T : row_counts) {
    const Rows x = random_rows(T, s.k, 5);
    DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(T * s.n) * sizeof(float));
    const TensorRef gx = Rows::device_ref(d_x, T, s.k), gout = Rows::device_ref(d_out, T, s.n);
    size_t next = 0;
    const double ms = median_ms(gpu, [&] {
      gpu.matmul(gx, w[next], nullptr, gout);
      next = (next + 1) % w.size();
    });
    std::printf("[ perf ] %-5s %-12s N=%-6lld K=%-5lld T=%-4lld %9.4f ms  weights %6.2f TB/s  %7.1f TOPS\n",
                std::string(dtype_name(type)).c_str(), s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), static_cast<long long>(T), ms, bytes / ms / 1e9,
                2.0 * T * s.n * s.k / ms / 1e9);
  }
}

TEST(CudaMatmulPerf, Llama3_8BShapes) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const Shape shapes[] = {{"attn q/o", 4096, 4096}, {"ffn up/gate", 14336, 4096}, {"ffn down", 4096, 14336},
                          {"output", 128256, 4096}};
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q8_0, DType::Q4_0})
    for (const Shape& s : shapes) measure(gpu, type, s, {1, 8});
  // Batched decode and prefill at one shape.
  measure(gpu, DType::Q4_K, shapes[1], {2, 4, 16, 64, 512});
  measure(gpu, DType::Q4_K, shapes[0], {64, 512});  // few weight rows: 32-row activation tiles at 64
  measure(gpu, DType::Q4_K, shapes[2], {64, 512});
  measure(gpu, DType::BF16, shapes[0], {1, 8});
  // The shape of the older throughput test (CudaPerf.MatmulThroughput), for comparison.
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0})
    measure(gpu, type, {"legacy", 32768, 8192}, {1});
}

// Decode of a few sequences at llama3-8b's shapes (the q/k/v and gate/up products stacked, as
// the model runs them): where the one-token kernels give way to the tensor-core kernel
// (matmul_exact.cpp) and which activation tile that takes (gemm_exact.cu).
TEST(CudaMatmulPerf, Llama3_8BFewRows) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const Shape shapes[] = {{"attn qkv", 6144, 4096}, {"attn o", 4096, 4096}, {"ffn gate+up", 28672, 4096},
                          {"ffn down", 4096, 14336}};
  for (const Shape& s : shapes) measure(gpu, DType::Q4_K, s, {1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17, 24, 32, 48, 64});
}

// The four products of a llama3-8b batch-64 decode step alone: one launch each per timed call,
// which is what a profiler (ncu --kernel-name regex:gemm_exact) needs to find them.
TEST(CudaMatmulPerf, Llama3_8BBatch64) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const Shape shapes[] = {{"attn qkv", 6144, 4096}, {"attn o", 4096, 4096}, {"ffn gate+up", 28672, 4096},
                          {"ffn down", 4096, 14336}};
  for (const Shape& s : shapes) measure(gpu, DType::Q4_K, s, {64});
}

// Batch-64 decode's largest products in each format the tensor-core kernel takes: Q4_K/Q5_K
// multiply their raw super-blocks (multiply_direct), the others decode each step to int8 rows
// first. Real Q4_K_M files hold Q6_K matrices, the default model Q4_1.
TEST(CudaMatmulPerf, Llama3_8BBatch64Formats) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const Shape shapes[] = {{"ffn gate+up", 28672, 4096}, {"ffn down", 4096, 14336}};
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::Q4_0, DType::Q4_1})
    for (const Shape& s : shapes) measure(gpu, type, s, {64});
}

// Every tile of `type` at these shapes and activation rows, the
// rule's choice (choose_gemm_tile) marked: the figures that tune the rule (gemm_tile.cpp).
void measure_tiles(CudaBackend& gpu, DType type, std::span<const Shape> shapes, std::span<const int64_t> row_counts) {
  ActivationFormat format;
  ASSERT_TRUE(activation_format_for(type, format));
  const GemmTileSet set = gemm_tile_set(type);
  for (const Shape& s : shapes) {
    const RotatingWeights weights(gpu, type, s);
    const std::vector<TensorRef>& w = weights.w;
    for (const int64_t T : row_counts) {
      const Rows x = random_rows(T, s.k, 5);
      DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(T * s.n) * sizeof(float));
      DeviceBuffer d_q(gpu, quantized_activation_bytes(T, s.k));
      const QuantizedActivations q = carve_quantized_activations(d_q.data(), T, s.k);
      launch_quantize_activations(Rows::device_ref(d_x, T, s.k), format, q, gpu.stream());
      const GemmTile chosen = choose_gemm_tile(T, s.n, gpu.sm_count(), set);
      for (const GemmTile& tile : gemm_tiles(set)) {
        size_t next = 0;
        const double ms = median_ms(gpu, [&] {
          launch_gemm_quantized_tile(q, T, w[next], nullptr, Rows::device_ref(d_out, T, s.n), tile, gpu.stream());
          next = (next + 1) % w.size();
        });
        std::printf("[ tile ] %-5s %-12s N=%-6lld K=%-5lld T=%-4lld %2d x %2d / %d %9.4f ms%s\n",
                    std::string(dtype_name(type)).c_str(), s.name, static_cast<long long>(s.n),
                    static_cast<long long>(s.k), static_cast<long long>(T), tile.activation_rows, tile.weight_rows,
                    tile.min_blocks, ms, tile == chosen ? "  <- rule" : "");
      }
    }
  }
}

// Every Q4_K tile at llama3-8b's decode shapes.
TEST(CudaMatmulPerf, Llama3_8BTiles) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const Shape shapes[] = {{"attn qkv", 6144, 4096}, {"attn o", 4096, 4096}, {"ffn gate+up", 28672, 4096},
                          {"ffn down", 4096, 14336}};
  const int64_t rows[] = {9, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 256};
  measure_tiles(gpu, DType::Q4_K, shapes, rows);
}

// Every Q6_K tile at the shapes Q4_K_M files hold in Q6_K (llama3-8b's attn_v and ffn_down in
// about half the layers, and the output).
TEST(CudaMatmulPerf, Llama3_8BTilesQ6K) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const Shape shapes[] = {{"attn v", 1024, 4096}, {"ffn down", 4096, 14336}, {"output", 128256, 4096}};
  const int64_t rows[] = {5, 8, 9, 16, 24, 32, 48, 64, 128};
  measure_tiles(gpu, DType::Q6_K, shapes, rows);
}

}  // namespace
}  // namespace cellm::cuda::testing
