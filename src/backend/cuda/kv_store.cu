// Writes a step's K and V rows into their pool rows (cells[t]), converting f32 to the pool's
// dtype with round-to-nearest-even, as the CPU kernel does.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) kv_store_kernel(const float* k, size_t k_stride, const float* v,
                                                            size_t v_stride, int64_t cols, char* k_pool, char* v_pool,
                                                            size_t pool_stride, DType dtype, const int32_t* cells) {
  allow_next_kernel();
  wait_for_inputs();
  // A thread per element (blockIdx.x: which kThreads of the row; y: K or V; z: the row).
  const int t = blockIdx.z;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (cells[t] < 0 || i >= cols) return;  // a padding row writes nothing
  const size_t offset = static_cast<size_t>(cells[t]) * pool_stride;
  const float* src = blockIdx.y == 0 ? k + t * k_stride : v + t * v_stride;
  void* dst = (blockIdx.y == 0 ? k_pool : v_pool) + offset;
  store_plain(dtype, dst, i, src[i]);
}

}  // namespace

void launch_kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst, cudaStream_t stream) {
  if (!is_plain(dst.dtype)) fail(ErrorCode::Unsupported, "KV dtype ", dtype_name(dst.dtype), " on CUDA");
  if (k.cols != v.cols || k.rows != v.rows) fail(ErrorCode::Internal, "kv_store: K and V shapes differ");
  if (k.rows == 0) return;
  if (k.rows > 65535) fail(ErrorCode::Internal, "kv_store over ", k.rows, " rows exceeds the grid");
  const dim3 grid(static_cast<unsigned>((k.cols + kThreads - 1) / kThreads), 2, static_cast<unsigned>(k.rows));
  launch_kernel("kv_store kernel", kv_store_kernel, grid, kThreads, 0, stream, static_cast<const float*>(k.data),
                k.row_stride / sizeof(float), static_cast<const float*>(v.data), v.row_stride / sizeof(float), k.cols,
                static_cast<char*>(dst.k), static_cast<char*>(dst.v), dst.row_stride, dst.dtype, dst.cells);
}

}  // namespace cellm::cuda
