// Element-wise kernels over f32 rows: residual add, gated activations, bias add. Memory-bound
// and tiny per element; one thread per element, rows on grid.y.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/glu_rules.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;

struct RowView {
  float* data;
  size_t stride;  // floats
  __device__ float* row(int64_t r) const { return data + r * stride; }
};

RowView view(const TensorRef& t) {
  if (t.dtype != DType::F32) fail(ErrorCode::Internal, "element-wise kernels work on f32 rows");
  return {static_cast<float*>(t.data), t.row_stride / sizeof(float)};
}

dim3 grid_for(const TensorRef& out) {
  if (out.rows > 65535) fail(ErrorCode::Internal, "element-wise kernel over ", out.rows, " rows exceeds the grid");
  return dim3(static_cast<unsigned>((out.cols + kThreads - 1) / kThreads), static_cast<unsigned>(out.rows));
}

__global__ void add_kernel(RowView a, RowView b, RowView out, int64_t cols) {
  allow_next_kernel();
  wait_for_inputs();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < cols) out.row(blockIdx.y)[i] = a.row(blockIdx.y)[i] + b.row(blockIdx.y)[i];
}

template <backend::GluActivation kAct>
__global__ void glu_kernel(RowView gate, RowView up, RowView out, int64_t cols) {
  allow_next_kernel();
  glu::prefetch_tables<kAct>();
  wait_for_inputs();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= cols) return;
  out.row(blockIdx.y)[i] = glu::gated<kAct>(gate.row(blockIdx.y)[i], up.row(blockIdx.y)[i]);
}

__global__ void add_bias_kernel(RowView out, const float* bias, int64_t cols) {
  allow_next_kernel();
  wait_for_inputs();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < cols) out.row(blockIdx.y)[i] += bias[i];
}

}  // namespace

void launch_add(const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream) {
  if (out.rows == 0 || out.cols == 0) return;
  launch_kernel("add kernel", add_kernel, grid_for(out), kThreads, 0, stream, view(a), view(b), view(out), out.cols);
}

void launch_glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out,
                cudaStream_t stream) {
  if (out.rows == 0 || out.cols == 0) return;
  if (act == backend::GluActivation::Silu)
    launch_kernel("glu kernel", glu_kernel<backend::GluActivation::Silu>, grid_for(out), kThreads, 0, stream,
                  view(gate), view(up), view(out), out.cols);
  else
    launch_kernel("glu kernel", glu_kernel<backend::GluActivation::GeluTanh>, grid_for(out), kThreads, 0, stream,
                  view(gate), view(up), view(out), out.cols);
}

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, add_kernel);
}

void launch_add_bias(const TensorRef& out, const float* bias, cudaStream_t stream) {
  if (out.rows == 0 || out.cols == 0) return;
  launch_kernel("bias kernel", add_bias_kernel, grid_for(out), kThreads, 0, stream, view(out), bias, out.cols);
}

}  // namespace cellm::cuda
