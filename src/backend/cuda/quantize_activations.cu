// Activation quantization on the GPU, bit for bit what backend/cpu/quant_activations.cpp
// produces; quantize_rules.cuh has the rules. Q8_0 / Q8_1: eight lanes per 32-value block, four
// values each; Q8_K: one warp per 256-value block, eight values per lane.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/matmul_kernels.h"
#include "backend/cuda/quantize_rules.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

// One 32-value block per 8 lanes.
template <bool kWithSums>
__global__ void __launch_bounds__(kThreads) quantize_q8_32(const float* x, size_t x_stride, int64_t rows,
                                                            int blocks, QuantizedActivations q) {
  allow_next_kernel();
  wait_for_inputs();
  // Every lane takes part in the shuffles; lanes past the end work on the last block and store
  // nothing.
  const int64_t wanted = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 8;  // (row, block)
  const bool valid = wanted < rows * blocks;
  const int64_t item = valid ? wanted : rows * blocks - 1;
  const int64_t t = item / blocks;
  const int b = static_cast<int>(item % blocks);
  const float* row = x + t * x_stride;
  quantize::produce_q8_32<kWithSums>([&](int at) { return *reinterpret_cast<const float4*>(row + at); }, nullptr, valid,
                                     q, t, b, blocks, static_cast<int>(threadIdx.x % 8));
}

// One 256-value block per warp.
__global__ void __launch_bounds__(kThreads) quantize_q8_k(const float* x, size_t x_stride, int64_t rows, int blocks,
                                                           QuantizedActivations q) {
  allow_next_kernel();
  wait_for_inputs();
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;  // (row, block)
  if (item >= rows * blocks) return;
  const int64_t t = item / blocks;
  const int b = static_cast<int>(item % blocks);
  const float* row = x + t * x_stride;
  quantize::produce_q8_k([&](int at) { return *reinterpret_cast<const float4*>(row + at); }, nullptr, q, t, b, blocks,
                         static_cast<int>(threadIdx.x % 32));
}

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

bool activation_format_for(DType weight, ActivationFormat& format) {
  switch (weight) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: format = ActivationFormat::Q8_0; return true;
    case DType::Q4_1:
    case DType::Q5_1: format = ActivationFormat::Q8_1; return true;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: format = ActivationFormat::Q8_K; return true;
    default: return false;
  }
}

size_t quantized_activation_bytes(int64_t rows, int64_t cols) {
  const auto elems = static_cast<size_t>(rows * cols);
  return align16(elems) + 2 * align16(elems / 32 * sizeof(float)) + align16(elems / 16 * sizeof(int16_t));
}

QuantizedActivations carve_quantized_activations(void* base, int64_t rows, int64_t cols) {
  const auto elems = static_cast<size_t>(rows * cols);
  auto* p = static_cast<char*>(base);
  QuantizedActivations q;
  q.codes = reinterpret_cast<int8_t*>(p);
  p += align16(elems);
  q.scales = reinterpret_cast<float*>(p);
  p += align16(elems / 32 * sizeof(float));
  q.sums = reinterpret_cast<float*>(p);
  p += align16(elems / 32 * sizeof(float));
  q.group_sums = reinterpret_cast<int16_t*>(p);
  q.row_stride = cols;
  return q;
}

void launch_quantize_activations(const TensorRef& x, ActivationFormat format, const QuantizedActivations& q,
                                 cudaStream_t stream) {
  const int block = activation_block_elems(format);
  if (x.dtype != DType::F32 || x.cols % block != 0 || x.row_stride % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x.data) % 16 != 0 || q.row_stride < x.cols || q.row_stride % 16 != 0)
    fail(ErrorCode::Internal, "activation quantization of ", x.rows, " x ", x.cols, " values (block ", block, ")");
  if (x.rows == 0) return;
  const int blocks = static_cast<int>(x.cols / block);
  const int64_t items = x.rows * blocks;
  const auto* src = static_cast<const float*>(x.data);
  const size_t stride = x.row_stride / sizeof(float);
  if (format == ActivationFormat::Q8_K) {
    launch_kernel("activation quantization kernel", quantize_q8_k, static_cast<unsigned>((items + kWarps - 1) / kWarps),
                  kThreads, 0, stream, src, stride, x.rows, blocks, q);
  } else {
    const auto grid = static_cast<unsigned>((items * 8 + kThreads - 1) / kThreads);
    if (format == ActivationFormat::Q8_1)
      launch_kernel("activation quantization kernel", quantize_q8_32<true>, grid, kThreads, 0, stream, src, stride,
                    x.rows, blocks, q);
    else
      launch_kernel("activation quantization kernel", quantize_q8_32<false>, grid, kThreads, 0, stream, src, stride,
                    x.rows, blocks, q);
  }
}

}  // namespace cellm::cuda
