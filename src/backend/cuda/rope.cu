// Rotary position embedding, in place, one block per row. Cos and sin come from the host-built
// table (rope_table.h: the CPU's bits) for positions it covers; beyond it the angle of pair i
// is pos * freq_scale * theta_scale^i built by repeated multiplication in float, as the CPU
// kernel (and ggml) do, with cos/sin evaluated in double and rounded once (the correctly
// rounded value, which host libms return in most cases). The rotation takes the CPU's float
// steps, unfused.
#include <cmath>

#include "backend/cuda/cuda_check.h"
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

__global__ void __launch_bounds__(kThreads) rope_kernel(RopeArgs a) {
  extern __shared__ float cos_sin[];  // [half][2]
  const int t = blockIdx.x;
  const int32_t pos = a.positions[t];
  const bool tabled = a.table != nullptr && pos >= 0 && pos < kRopeTablePositions;
  for (int i = threadIdx.x; i < a.half; i += kThreads) {
    if (tabled) {
      const float2 cs = a.table[static_cast<size_t>(pos) * a.half + i];
      cos_sin[2 * i] = cs.x;
      cos_sin[2 * i + 1] = cs.y;
    } else {
      float theta = __fmul_rn(static_cast<float>(pos), a.freq_scale);
      for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, a.theta_scale);
      cos_sin[2 * i] = static_cast<float>(cos(static_cast<double>(theta)));
      cos_sin[2 * i + 1] = static_cast<float>(sin(static_cast<double>(theta)));
    }
  }
  __syncthreads();
  float* row = a.x + t * a.stride;
  for (int p = threadIdx.x; p < a.n_heads * a.half; p += kThreads) {
    const int h = p / a.half, i = p % a.half;
    float* head = row + static_cast<size_t>(h) * a.head_dim;
    const int ia = a.interleaved ? 2 * i : i;
    const int ib = a.interleaved ? 2 * i + 1 : i + a.half;
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = head[ia], x1 = head[ib];
    head[ia] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    head[ib] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
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
  rope_kernel<<<static_cast<unsigned>(x.rows), kThreads, sizeof(float) * p.rope_dim, stream>>>(args);
  check_launch("rope kernel");
}

}  // namespace cellm::cuda
