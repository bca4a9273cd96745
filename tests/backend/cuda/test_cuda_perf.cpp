// Throughput figures of the main kernels on the GPU (run with CELLM_CUDA_PERF=1). Prints
// bandwidth and FLOP rates; asserts nothing about time. Weights are random bytes: the kernels
// do the same work whatever the values.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/cuda/matmul.h"
#include "cuda_test_support.h"
#include "perf_support.h"

namespace cellm::cuda::testing {
namespace {

// Mean milliseconds of fn over `iters` runs after a warm-up, timed with events on the stream.
template <typename Fn>
double time_ms(CudaBackend& gpu, int iters, Fn&& fn) {
  fn();
  gpu.synchronize();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, gpu.stream());
  for (int i = 0; i < iters; ++i) fn();
  cudaEventRecord(stop, gpu.stream());
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

// The same, with the iterations recorded in a CUDA graph and replayed: what a captured decode
// step sees, without the host's ~4 us per launch (which bounds short kernels timed from a stream).
template <typename Fn>
double graph_time_ms(CudaBackend& gpu, int iters, Fn&& fn) {
  fn();
  gpu.synchronize();
  gpu.begin_capture();
  for (int i = 0; i < iters; ++i) fn();
  const std::unique_ptr<backend::Graph> graph = gpu.end_capture();
  graph->launch();  // warm-up
  return time_ms(gpu, 3, [&] { graph->launch(); }) / iters;
}

TEST(CudaPerf, MatmulThroughput) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const int64_t N = 32768, K = 8192;  // weights several times the 60 MB L2
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                     DType::BF16}) {
    const size_t bytes = row_bytes(type, K) * N;
    // fp16 scales kept finite so no kernel takes a slow path on NaN/inf (it would not, but the
    // figures should not depend on it).
    std::vector<uint8_t> host = random_weight_bytes(bytes, 1);
    const TensorRef placed = gpu.place_weight({host.data(), type, N, K, row_bytes(type, K)}, "perf");
    host.clear();
    host.shrink_to_fit();
    for (int64_t T : {1, 2, 4, 8, 16, 64, 512}) {
      const Rows x = random_rows(T, K, 5);
      DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(T * N) * sizeof(float));
      const TensorRef gx = Rows::device_ref(d_x, T, K), gout = Rows::device_ref(d_out, T, N);
      const double ms = time_ms(gpu, T <= kGemvMaxRows ? 50 : 10, [&] { gpu.matmul(gx, placed, nullptr, gout); });
      std::printf("[ perf ] matmul %-5s N=%lld K=%lld T=%-4lld %8.3f ms  weights %7.1f GB/s  %7.1f TFLOP/s\n",
                  std::string(dtype_name(type)).c_str(), static_cast<long long>(N), static_cast<long long>(K),
                  static_cast<long long>(T), ms, bytes / ms / 1e6, 2.0 * T * N * K / ms / 1e9);
    }
    gpu.release(placed.data);
  }
}

// Streams one activation row through an n x k matrix of `type`, placed in enough copies to pass
// 256 MB so the weights come from HBM as in a model's layers (not from the 50 MB L2), and prints
// the time from a stream and from a graph.
void time_one_row(CudaBackend& gpu, DType type, const char* what, int64_t n, int64_t k) {
  const size_t bytes = row_bytes(type, k) * n;
  const int copies = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / bytes + 1));
  std::vector<TensorRef> placed;
  {
    const std::vector<uint8_t> host = random_weight_bytes(bytes, 1);
    for (int c = 0; c < copies; ++c)
      placed.push_back(gpu.place_weight({const_cast<uint8_t*>(host.data()), type, n, k, row_bytes(type, k)}, "perf"));
  }
  const Rows x = random_rows(1, k, 5);
  DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(n) * sizeof(float));
  const TensorRef gx = Rows::device_ref(d_x, 1, k), gout = Rows::device_ref(d_out, 1, n);
  int next = 0;
  gpu.begin_forward(1);  // the launches of a one-row decode step
  const double ms = time_ms(gpu, 4 * copies, [&] { gpu.matmul(gx, placed[next++ % copies], nullptr, gout); });
  const double graph_ms = graph_time_ms(gpu, 4 * copies, [&] { gpu.matmul(gx, placed[next++ % copies], nullptr, gout); });
  std::printf("[ perf ] gemv %-5s %-16s N=%-6lld K=%-6lld stream %8.4f ms %7.1f GB/s  graph %8.4f ms %7.1f GB/s\n",
              std::string(dtype_name(type)).c_str(), what, static_cast<long long>(n), static_cast<long long>(k), ms,
              bytes / ms / 1e6, graph_ms, bytes / graph_ms / 1e6);
  for (const TensorRef& p : placed) gpu.release(p.data);
}

// One activation row against llama3-8b's matrix shapes, the single-stream decode case.
TEST(CudaPerf, GemvModelShapes) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  struct Shape {
    const char* what;
    int64_t n, k;
  };
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::BF16})
    for (const Shape& sh : {Shape{"q+k+v", 6144, 4096}, Shape{"o", 4096, 4096}, Shape{"gate+up", 28672, 4096},
                            Shape{"down", 4096, 14336}, Shape{"output", 128256, 4096}})
      time_one_row(gpu, type, sh.what, sh.n, sh.k);
}

// The small models' short rows (a pass or two of the one-token kernel), where a vocabulary-wide
// output matrix is most of a decode step's weights: SmolLM2-135M's (Q4_1 layers, Q8_0 output)
// and Gemma 3 270M's (Q5_0 projections, Q8_0 output: 178 of its 247 MB).
TEST(CudaPerf, GemvShortRows) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  struct Shape {
    DType type;
    const char* what;
    int64_t n, k;
  };
  for (const Shape& sh : {Shape{DType::Q4_1, "smol q+k+v", 960, 576}, Shape{DType::Q4_1, "smol gate+up", 3072, 576},
                          Shape{DType::Q4_1, "smol down", 576, 1536}, Shape{DType::Q8_0, "smol output", 49152, 576},
                          Shape{DType::Q5_0, "gemma gate+up", 4096, 640}, Shape{DType::Q8_0, "gemma output", 262144, 640}})
    time_one_row(gpu, sh.type, sh.what, sh.n, sh.k);
}

// The KV heads of llama3-8b (8 x 128, group 4) and of SmolLM2, the default model (3 x 64, group
// 3), whose one-row attention was 37% of a decode step (kernel trace, stop 20).
struct AttentionShape {
  int32_t n_kv, hd, group;
};

TEST(CudaPerf, AttentionDecodeThroughput) {
  CELLM_REQUIRE_GPU(gpu);
  if (!perf_enabled()) GTEST_SKIP() << "set CELLM_CUDA_PERF=1 for throughput figures";
  const int32_t P = 16;
  for (const AttentionShape shape : {AttentionShape{8, 128, 4}, AttentionShape{3, 64, 3}}) {
    const int32_t n_kv = shape.n_kv, hd = shape.hd, group = shape.group;
    const size_t row_stride = size_t{2} * n_kv * hd * 2;  // this layer's K and V
    for (int32_t context : {64, 640, 2048, 8192, 32768}) {
      for (int32_t rows : {1, 8, 64}) {
        const int32_t pages_per_row = context / P;
        const int64_t pool_rows = int64_t{pages_per_row} * P * rows;
        DeviceBuffer pool(gpu, static_cast<size_t>(pool_rows) * row_stride);
        cudaMemsetAsync(pool.data(), 0, static_cast<size_t>(pool_rows) * row_stride, gpu.stream());
        std::vector<int32_t> cell_pos(static_cast<size_t>(pool_rows)), page_rows, pages, positions;
        for (int32_t r = 0; r < rows; ++r) {
          page_rows.push_back(static_cast<int32_t>(pages.size()));
          for (int32_t p = 0; p < pages_per_row; ++p) {
            const int32_t page = r * pages_per_row + p;
            pages.push_back(page);
            for (int32_t s = 0; s < P; ++s) cell_pos[static_cast<size_t>(page * P + s)] = p * P + s;
          }
          positions.push_back(context - 1);
        }
        page_rows.push_back(static_cast<int32_t>(pages.size()));
        DeviceBuffer d_cell_pos(gpu, cell_pos), d_page_rows(gpu, page_rows), d_pages(gpu, pages), d_pos(gpu, positions);
        const int64_t q_cols = int64_t{n_kv} * group * hd;
        const Rows q = random_rows(rows, q_cols, 3);
        DeviceBuffer d_q(gpu, q.values), d_out(gpu, q.values.size() * sizeof(float));
        const backend::PagedKv kv{pool.data(), pool.as<char>() + n_kv * hd * 2, row_stride, DType::F16, n_kv, hd, 0, P,
                                  d_cell_pos.as<int32_t>(), d_page_rows.as<int32_t>(), d_pages.as<int32_t>()};
        const auto attend = [&] {
          gpu.attention(Rows::device_ref(d_q, rows, q_cols), kv, d_pos.as<int32_t>(), 0.08f,
                        Rows::device_ref(d_out, rows, q_cols));
        };
        gpu.begin_forward(rows);  // the launches of a decode step of this width
        const double ms = time_ms(gpu, 20, attend);
        const double graph_ms = graph_time_ms(gpu, 20, attend);  // a decode step's view: no host launch cost
        const double kv_bytes = static_cast<double>(pool_rows) * row_stride;
        std::printf("[ perf ] attention rows=%-3d context=%-6d kv heads %d x %d, group %d: stream %8.4f ms  "
                    "graph %8.4f ms  KV %7.1f GB/s\n",
                    rows, context, n_kv, hd, group, ms, graph_ms, kv_bytes / graph_ms / 1e6);
      }
    }
  }
}

}  // namespace
}  // namespace cellm::cuda::testing
