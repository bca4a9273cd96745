// Activations quantized for the integer GEMV: each 32-element unit of a row becomes 32 int8
// values q with one scale d = max|x| / 127 (x ~ d * q) and the scaled sum d * sum(q), which the
// weights' per-unit offsets multiply. One warp per unit; every value is computed the same way
// whatever the number of rows, so a row's result does not depend on its batch.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(32 * kWarps) quantize_kernel(const float* x, size_t x_stride, int64_t rows,
                                                                int units, QuantizedRows q) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;  // (row, unit)
  if (item >= rows * units) return;
  const int64_t t = item / units;
  const int u = static_cast<int>(item % units);
  const int lane = threadIdx.x % 32;
  const float v = x[t * x_stride + static_cast<int64_t>(u) * 32 + lane];
  float amax = fabsf(v);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float d = amax / 127.0f;
  const int value = d == 0.0f ? 0 : max(-127, min(127, __float2int_rn(v / d)));
  q.values[t * q.row_stride + static_cast<int64_t>(u) * 32 + lane] = static_cast<int8_t>(value);
  int sum = value;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) {
    q.scales[t * units + u] = d;
    q.sums[t * units + u] = d * static_cast<float>(sum);
  }
}

}  // namespace

void launch_quantize_activations(const TensorRef& x, const QuantizedRows& q, cudaStream_t stream) {
  if (x.dtype != DType::F32 || x.cols % 32 != 0) fail(ErrorCode::Internal, "activation quantization of ", x.cols, " columns");
  const int units = static_cast<int>(x.cols / 32);
  const int64_t items = x.rows * units;
  if (items == 0) return;
  quantize_kernel<<<static_cast<unsigned>((items + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(
      static_cast<const float*>(x.data), x.row_stride / sizeof(float), x.rows, units, q);
  check_launch("activation quantization kernel");
}

}  // namespace cellm::cuda
