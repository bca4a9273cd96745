// Rotary position embedding, in place, one thread per rotated pair. Cos and sin come from the
// host-built table (rope_table.h: the CPU's bits) for positions it covers; beyond it the angle
// of pair i is pos * freq_scale * theta_scale^i built by repeated multiplication in float, as
// the CPU kernel (and ggml) do, with cos/sin evaluated in double and rounded once (the
// correctly rounded value, which host libms return in most cases). The rotation takes the
// CPU's float steps, unfused.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/rope_table.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;

struct RopeArgs {
  float* x;
  size_t stride;  // floats
  const int32_t* positions;
  int n_heads;
  int head_dim;
  int half;  // rope_dim / 2
  float freq_scale;
  float theta_scale;
  bool interleaved;
  const float2* table;  // [kRopeTablePositions][half] or null
};

// A thread per rotated pair (head h, pair i) of row blockIdx.y: a row's pairs spread over
// blocks, so no thread walks a row's pairs one global load after another.
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeArgs a) {
  allow_next_kernel();
  wait_for_inputs();
  const int t = blockIdx.y;
  const int p = blockIdx.x * kThreads + threadIdx.x;
  if (p >= a.n_heads * a.half) return;
  const int h = p / a.half, i = p % a.half;
  const int32_t pos = a.positions[t];
  float c, s;
  if (a.table != nullptr && pos >= 0 && pos < kRopeTablePositions) {
    const float2 cs = a.table[static_cast<size_t>(pos) * a.half + i];
    c = cs.x;
    s = cs.y;
  } else {
    float theta = __fmul_rn(static_cast<float>(pos), a.freq_scale);
    for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, a.theta_scale);
    c = static_cast<float>(cos(static_cast<double>(theta)));
    s = static_cast<float>(sin(static_cast<double>(theta)));
  }
  float* head = a.x + t * a.stride + static_cast<size_t>(h) * a.head_dim;
  const int ia = a.interleaved ? 2 * i : i;
  const int ib = a.interleaved ? 2 * i + 1 : i + a.half;
  const float x0 = head[ia], x1 = head[ib];
  head[ia] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  head[ib] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

}  // namespace

void launch_rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& p, const float2* table,
                 cudaStream_t stream) {
  if (x.dtype != DType::F32) fail(ErrorCode::Internal, "rope works on f32 rows");
  if (p.rope_dim <= 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.head_dim || x.cols < int64_t{p.n_heads} * p.head_dim)
    fail(ErrorCode::Internal, "rope: rope_dim ", p.rope_dim, " / head_dim ", p.head_dim, " / heads ", p.n_heads,
         " do not fit rows of ", x.cols);
  if (x.rows == 0) return;
  // Same expression as the CPU kernel, evaluated on the host in float.
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(p.rope_dim));
  const RopeArgs args{static_cast<float*>(x.data), x.row_stride / sizeof(float), positions, p.n_heads, p.head_dim,
                      p.rope_dim / 2, p.freq_scale, theta_scale, p.layout == backend::RopeLayout::Interleaved,
                      table};
  if (x.rows > 65535) fail(ErrorCode::Internal, "rope over ", x.rows, " rows exceeds the grid");
  const int64_t pairs = int64_t{p.n_heads} * (p.rope_dim / 2);
  const dim3 grid(static_cast<unsigned>((pairs + kThreads - 1) / kThreads), static_cast<unsigned>(x.rows));
  launch_kernel("rope kernel", rope_kernel, grid, kThreads, 0, stream, args);
}

}  // namespace cellm::cuda
