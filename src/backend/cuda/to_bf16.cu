// Conversions to dense bf16 for the tensor-core path of large matrix products: weight rows of
// any format (decoded with the shared unit decoders) and f32 activation rows.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "backend/cuda/weight_units.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

template <class Unit>
__global__ void __launch_bounds__(kThreads) dequantize_units(const uint8_t* w, size_t w_stride, int64_t row0,
                                                             int64_t cols, __nv_bfloat16* dst) {
  allow_next_kernel();
  wait_for_inputs();
  const uint8_t* row = w + static_cast<size_t>(row0 + blockIdx.x) * w_stride;
  __nv_bfloat16* y = dst + static_cast<size_t>(blockIdx.x) * cols;
  const int q = threadIdx.x % kLanesPerUnit;
  const int units = static_cast<int>(cols / kUnitElems);
  for (int u = threadIdx.x / kLanesPerUnit; u < units; u += kThreads / kLanesPerUnit) {
    float v[kLaneElems];
    Unit::decode(row, u, q, v);
    // Four consecutive elements per 8-byte store (rows of whole units keep them aligned).
    uint32_t packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      packed[i] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    __nv_bfloat16* base = y + kUnitElems * u;
    *reinterpret_cast<uint2*>(base + unit_offset<Unit::kSplit>(q, 0)) = make_uint2(packed[0], packed[1]);
    *reinterpret_cast<uint2*>(base + unit_offset<Unit::kSplit>(q, 4)) = make_uint2(packed[2], packed[3]);
  }
}

__global__ void __launch_bounds__(kThreads) convert_plain(const uint8_t* src, size_t src_stride, DType type,
                                                          int64_t row0, int64_t cols, __nv_bfloat16* dst) {
  allow_next_kernel();
  wait_for_inputs();
  const uint8_t* row = src + static_cast<size_t>(row0 + blockIdx.x) * src_stride;
  __nv_bfloat16* y = dst + static_cast<size_t>(blockIdx.x) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) y[i] = __float2bfloat16_rn(load_plain(type, row, i));
}

void check_rows(const TensorRef& t, int64_t row0, int64_t rows) {
  if (row0 < 0 || rows < 0 || row0 + rows > t.rows || rows > int64_t{1} << 31)
    fail(ErrorCode::Internal, "bf16 conversion of rows [", row0, ", ", row0 + rows, ") of ", t.rows);
}

}  // namespace

void launch_dequantize_bf16(const TensorRef& w, int64_t row0, int64_t rows, void* dst, cudaStream_t stream) {
  check_rows(w, row0, rows);
  if (rows == 0) return;
  auto* out = static_cast<__nv_bfloat16*>(dst);
  const auto* src = static_cast<const uint8_t*>(w.data);
  const dim3 grid(static_cast<unsigned>(rows));
  if (is_plain(w.dtype)) {
    launch_kernel("dequantize kernel", convert_plain, grid, kThreads, 0, stream, src, w.row_stride, w.dtype, row0,
                  w.cols, out);
  } else if (!visit_unit_format(w.dtype, [&]<class Unit>(Unit) {
               launch_kernel("dequantize kernel", dequantize_units<Unit>, grid, kThreads, 0, stream, src, w.row_stride,
                             row0, w.cols, out);
             })) {
    fail(ErrorCode::Unsupported, "weights of type ", dtype_name(w.dtype), " on CUDA");
  }
}

void launch_convert_bf16(const TensorRef& x, int64_t row0, int64_t rows, void* dst, cudaStream_t stream) {
  check_rows(x, row0, rows);
  if (rows == 0) return;
  launch_kernel("bf16 conversion kernel", convert_plain, static_cast<unsigned>(rows), kThreads, 0, stream,
                static_cast<const uint8_t*>(x.data), x.row_stride, x.dtype, row0, x.cols,
                static_cast<__nv_bfloat16*>(dst));
}

}  // namespace cellm::cuda
