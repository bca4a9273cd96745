// out[i] = x[rows[i]]: the rows whose logits are wanted. The indices live on the device, so a
// bad one cannot be reported without a synchronisation; it yields a zero row instead (the
// executor validates logit rows before the step).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const uint32_t* x, size_t x_stride, int64_t x_rows,
                                                               const int32_t* rows, uint32_t* out, size_t out_stride,
                                                               int64_t words) {
  allow_next_kernel();
  wait_for_inputs();
  const int32_t r = rows[blockIdx.x];
  const bool valid = r >= 0 && r < x_rows;
  const uint32_t* src = x + static_cast<size_t>(valid ? r : 0) * x_stride;
  uint32_t* dst = out + blockIdx.x * out_stride;
  for (int64_t i = threadIdx.x; i < words; i += kThreads) dst[i] = valid ? src[i] : 0u;
}

}  // namespace

void launch_gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out, cudaStream_t stream) {
  const size_t bytes = row_bytes(x.dtype, x.cols);
  if (bytes % 4 != 0 || x.row_stride % 4 != 0 || out.row_stride % 4 != 0)
    fail(ErrorCode::Internal, "gather_rows needs rows of whole 32-bit words");
  if (out.rows == 0) return;
  launch_kernel("gather_rows kernel", gather_rows_kernel, static_cast<unsigned>(out.rows), kThreads, 0, stream,
                static_cast<const uint32_t*>(x.data), x.row_stride / 4, x.rows, rows, static_cast<uint32_t*>(out.data),
                out.row_stride / 4, static_cast<int64_t>(bytes / 4));
}

}  // namespace cellm::cuda
