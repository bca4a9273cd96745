// Embedding lookup: one block per token dequantizes its row of the table (any weight format)
// with the shared unit decoders, so values equal gguf::dequantize_row's bit for bit.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "backend/cuda/weight_units.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

struct EmbedArgs {
  const uint8_t* table;
  size_t table_stride;
  int64_t vocab;
  const int32_t* tokens;
  float scale;
  float* out;
  size_t out_stride;  // floats
  int64_t cols;
};

__device__ __forceinline__ float scaled(float v, float scale) { return scale == 1.0f ? v : __fmul_rn(v, scale); }

template <class Unit>
__global__ void __launch_bounds__(kThreads) embed_units(EmbedArgs a) {
  allow_next_kernel();
  wait_for_inputs();
  const int32_t token = a.tokens[blockIdx.x];
  const bool valid = token >= 0 && token < a.vocab;
  const uint8_t* row = a.table + static_cast<size_t>(valid ? token : 0) * a.table_stride;
  float* y = a.out + blockIdx.x * a.out_stride;
  const int q = threadIdx.x % kLanesPerUnit;
  const int units = static_cast<int>(a.cols / kUnitElems);
  for (int u = threadIdx.x / kLanesPerUnit; u < units; u += kThreads / kLanesPerUnit) {
    float w[kLaneElems];
    Unit::decode(row, u, q, w);
#pragma unroll
    for (int i = 0; i < kLaneElems; ++i)
      y[kUnitElems * u + unit_offset<Unit::kSplit>(q, i)] = valid ? scaled(w[i], a.scale) : 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads) embed_plain(EmbedArgs a, DType type) {
  allow_next_kernel();
  wait_for_inputs();
  const int32_t token = a.tokens[blockIdx.x];
  const bool valid = token >= 0 && token < a.vocab;
  const uint8_t* row = a.table + static_cast<size_t>(valid ? token : 0) * a.table_stride;
  float* y = a.out + blockIdx.x * a.out_stride;
  for (int64_t i = threadIdx.x; i < a.cols; i += kThreads) y[i] = valid ? scaled(load_plain(type, row, i), a.scale) : 0.0f;
}

}  // namespace

void launch_embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out,
                  cudaStream_t stream) {
  if (out.dtype != DType::F32) fail(ErrorCode::Internal, "embedding output must be f32");
  if (out.cols != table.cols) fail(ErrorCode::Internal, "embedding output has ", out.cols, " columns, table ", table.cols);
  if (out.rows == 0) return;
  const EmbedArgs args{static_cast<const uint8_t*>(table.data), table.row_stride, table.rows, tokens, scale,
                       static_cast<float*>(out.data), out.row_stride / sizeof(float), out.cols};
  const dim3 grid(static_cast<unsigned>(out.rows));
  if (is_plain(table.dtype)) {
    launch_kernel("embed kernel", embed_plain, grid, kThreads, 0, stream, args, table.dtype);
  } else if (!visit_unit_format(table.dtype, [&]<class Unit>(Unit) {
               launch_kernel("embed kernel", embed_units<Unit>, grid, kThreads, 0, stream, args);
             })) {
    fail(ErrorCode::Unsupported, "embedding table of type ", dtype_name(table.dtype), " on CUDA");
  }
}

}  // namespace cellm::cuda
