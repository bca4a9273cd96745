// Rotary position embedding, in place, one thread per rotated pair (fused with the K/V store
// that follows it in a layer, the same threads also store K's rotated pairs: one launch fewer
// per layer). Cos and sin come from the host-built table (rope_table.h: the CPU's bits) for
// positions it covers; beyond it the angle of pair i is pos * freq_scale * theta_scale^i built
// by repeated multiplication in float, as the CPU kernel (and ggml) do, with cos/sin evaluated
// in double and rounded once (the correctly rounded value, which host libms return in most
// cases). The rotation takes the CPU's float steps, unfused.
//
// A decode step's attention rotates its query and new key itself and stores K and V
// (attention.cu, rope_rules.cuh): these kernels serve prefill and the steps its staged kernel
// does not take.
//
// Measured and set aside (stop 31): the one-row q/k/v product rotating the pairs it writes and
// storing K and V itself, this launch gone. llama3-8b b1, H200, one run: step 1939.6 -> 2001.9 us.
// The product with that epilogue took 7.2 us a call against 5.5; attention, which now followed
// the product directly, could no longer start while this small kernel ran (281.6 -> 305.7 us a
// step); and compiled into every product its registers (111 -> 123) took the room the kernel
// after a product starts early in (glu_quantize 92.9 -> 120.7 us a step).
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "backend/cuda/rope_rules.cuh"
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
  rope::Angles angles;  // angles.half: rope_dim / 2
  bool interleaved;
};

// The cosine and sine that rotate pair p (head p / half, pair p % half) of row t. Reads only the
// uploaded positions and the table built at load, so the kernels find it before
// wait_for_inputs, while the kernel ahead ends.
__device__ __forceinline__ float2 angle_of(const RopeArgs& a, int t, int p) {
  return rope::angle_of(a.angles, a.positions[t], p % a.angles.half);
}

// Rotates pair p of row t in place by cs = angle_of(a, t, p); returns the pair's two columns
// within the head and their new values.
struct Rotated {
  int head, ia, ib;
  float a, b;
};
__device__ __forceinline__ Rotated rotate_pair(const RopeArgs& a, int t, int p, float2 cs) {
  const int half = a.angles.half, h = p / half, i = p % half;
  float* head = a.x + t * a.stride + static_cast<size_t>(h) * a.head_dim;
  Rotated r{h, rope::first_column(a.interleaved, i), rope::second_column(a.interleaved, half, i), 0.0f, 0.0f};
  const float x0 = head[r.ia], x1 = head[r.ib];
  r.a = rope::rotated_first(x0, x1, cs);
  r.b = rope::rotated_second(x0, x1, cs);
  head[r.ia] = r.a;
  head[r.ib] = r.b;
  return r;
}

// A thread per rotated pair (head h, pair i) of row blockIdx.y: a row's pairs spread over
// blocks, so no thread walks a row's pairs one global load after another.
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeArgs a) {
  allow_next_kernel();
  const int p = blockIdx.x * kThreads + threadIdx.x;
  const bool rotates = p < a.n_heads * a.angles.half;
  const float2 cs = rotates ? angle_of(a, blockIdx.y, p) : float2{};
  wait_for_inputs();
  if (rotates) rotate_pair(a, blockIdx.y, p, cs);
}

// Where the fused kernel stores K and V: x's heads k_head0 .. k_head0 + k_heads - 1 are K.
struct KvArgs {
  int k_head0, k_heads;
  const float* v;
  size_t v_stride;  // floats
  int v_cols;
  char* k_pool;
  char* v_pool;
  size_t pool_stride;  // bytes
  DType dtype;
  const int32_t* cells;
};

// rope_kernel's threads, each also storing its pair where it is K's, then a thread per V
// element; padding rows (cells[t] < 0) rotate and store nothing, as kv_store_kernel.
__global__ void __launch_bounds__(kThreads) rope_kv_store_kernel(RopeArgs a, KvArgs kv) {
  allow_next_kernel();
  const int t = blockIdx.y;
  const int p = blockIdx.x * kThreads + threadIdx.x;
  const int pairs = a.n_heads * a.angles.half;
  const int32_t cell = kv.cells[t];  // uploaded, as the angle: both before the wait
  const float2 cs = p < pairs ? angle_of(a, t, p) : float2{};
  wait_for_inputs();
  if (p < pairs) {
    const Rotated r = rotate_pair(a, t, p, cs);
    const int kh = r.head - kv.k_head0;
    if (cell < 0 || kh < 0 || kh >= kv.k_heads) return;
    char* dst = kv.k_pool + static_cast<size_t>(cell) * kv.pool_stride;
    store_plain(kv.dtype, dst, static_cast<int64_t>(kh) * a.head_dim + r.ia, r.a);
    store_plain(kv.dtype, dst, static_cast<int64_t>(kh) * a.head_dim + r.ib, r.b);
  } else if (p - pairs < kv.v_cols && cell >= 0) {
    const int i = p - pairs;
    store_plain(kv.dtype, kv.v_pool + static_cast<size_t>(cell) * kv.pool_stride, i, kv.v[t * kv.v_stride + i]);
  }
}

RopeArgs rope_args(const TensorRef& x, const int32_t* positions, const backend::RopeParams& p, const float2* table) {
  if (x.dtype != DType::F32) fail(ErrorCode::Internal, "rope works on f32 rows");
  if (p.rope_dim <= 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.head_dim || x.cols < int64_t{p.n_heads} * p.head_dim)
    fail(ErrorCode::Internal, "rope: rope_dim ", p.rope_dim, " / head_dim ", p.head_dim, " / heads ", p.n_heads,
         " do not fit rows of ", x.cols);
  if (x.rows > 65535) fail(ErrorCode::Internal, "rope over ", x.rows, " rows exceeds the grid");
  return {static_cast<float*>(x.data), x.row_stride / sizeof(float), positions, p.n_heads, p.head_dim,
          rope_angles(p, table), p.layout == backend::RopeLayout::Interleaved};
}

}  // namespace

rope::Angles rope_angles(const backend::RopeParams& p, const float2* table) {
  // Same expression as the CPU kernel, evaluated on the host in float.
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(p.rope_dim));
  return {table, p.rope_dim / 2, p.freq_scale, theta_scale};
}

void launch_rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& p, const float2* table,
                 cudaStream_t stream) {
  const RopeArgs args = rope_args(x, positions, p, table);
  if (x.rows == 0) return;
  const int64_t pairs = int64_t{p.n_heads} * (p.rope_dim / 2);
  const dim3 grid(static_cast<unsigned>((pairs + kThreads - 1) / kThreads), static_cast<unsigned>(x.rows));
  launch_kernel("rope kernel", rope_kernel, grid, kThreads, 0, stream, args);
}

namespace {

// The column of x's rows where k's rows start, or -1 where k does not start inside them.
int64_t first_column_in(const TensorRef& x, const TensorRef& k) {
  const auto* xs = static_cast<const char*>(x.data);
  const auto* ks = static_cast<const char*>(k.data);
  if (ks < xs || static_cast<size_t>(ks - xs) >= x.row_stride || (ks - xs) % sizeof(float) != 0) return -1;
  return (ks - xs) / static_cast<int64_t>(sizeof(float));
}

}  // namespace

bool rope_kv_store_fusable(const TensorRef& x, const backend::RopeParams& p, const TensorRef& k, const TensorRef& v,
                           const backend::KvDestination& dst) {
  if (x.dtype != DType::F32 || k.dtype != DType::F32 || v.dtype != DType::F32 || !is_plain(dst.dtype)) return false;
  if (p.rope_dim != p.head_dim || k.rows != x.rows || v.rows != x.rows || k.cols != v.cols ||
      k.row_stride != x.row_stride || k.cols % p.head_dim != 0)
    return false;
  // K must be whole heads among x's rotated ones, in the same rows.
  const int64_t first_col = first_column_in(x, k);
  return first_col >= 0 && first_col % p.head_dim == 0 && first_col + k.cols <= int64_t{p.n_heads} * p.head_dim;
}

void launch_rope_kv_store(const TensorRef& x, const int32_t* positions, const backend::RopeParams& p,
                          const float2* table, const TensorRef& k, const TensorRef& v,
                          const backend::KvDestination& dst, cudaStream_t stream) {
  if (!rope_kv_store_fusable(x, p, k, v, dst)) fail(ErrorCode::Internal, "rope_kv_store: operands that do not fuse");
  const RopeArgs args = rope_args(x, positions, p, table);
  if (x.rows == 0) return;
  const KvArgs kv{static_cast<int>(first_column_in(x, k) / p.head_dim),
                  static_cast<int>(k.cols / p.head_dim),
                  static_cast<const float*>(v.data),
                  v.row_stride / sizeof(float),
                  static_cast<int>(v.cols),
                  static_cast<char*>(dst.k),
                  static_cast<char*>(dst.v),
                  dst.row_stride,
                  dst.dtype,
                  dst.cells};
  const int64_t threads = int64_t{p.n_heads} * (p.rope_dim / 2) + v.cols;
  const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads), static_cast<unsigned>(x.rows));
  launch_kernel("rope_kv_store kernel", rope_kv_store_kernel, grid, kThreads, 0, stream, args, kv);
}

}  // namespace cellm::cuda
