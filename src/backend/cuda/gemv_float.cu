// The exact product of F32/F16/BF16 weights with f32 activations, for up to kGemvTileTokens
// activation rows per block. The CPU's AVX-512 kernel keeps 16 running sums per output
// (element k goes to sum k % 16, one fused multiply-add per element in element order) and
// reduces them with the fixed tree of _mm512_reduce_add_ps:
//     h[j] = s[j] + s[j + 8]; q[i] = h[i] + h[i + 4]; out = (q[0] + q[2]) + (q[1] + q[3]).
// Here four lanes own one weight row, lane c the sums 4c..4c+3 (so each reads four consecutive
// elements per 16), and the tree runs over two shuffles; a warp covers eight rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/gemv.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/plain_values.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kRowsPerWarp = 8;

struct FloatArgs {
  const uint8_t* w;
  size_t w_stride;  // bytes
  int64_t n;
  int64_t cols;
  const float* x;
  size_t x_stride;  // floats
  int64_t tokens;
  float* out;
  size_t out_stride;
  ProductAddend addend;
  int64_t groups_per_warp;  // groups of kRowsPerWarp rows
};

template <DType kT>
__device__ __forceinline__ float4 weights4(const uint8_t* row, int64_t k) {
  if constexpr (kT == DType::F32) return __ldg(reinterpret_cast<const float4*>(row + 4 * k));
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(row + 2 * k));
  const float2 a = unpack_16x2<kT == DType::BF16>(v.x), b = unpack_16x2<kT == DType::BF16>(v.y);
  return make_float4(a.x, a.y, b.x, b.y);
}

template <DType kT, int T>
__global__ void __launch_bounds__(kGemvThreads) gemv_float_kernel(FloatArgs a) {
  allow_next_kernel();
  wait_for_inputs();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = lane % 4;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * T;
  const int t_count = static_cast<int>(min(static_cast<int64_t>(T), a.tokens - t0));
  const float* x[T];
#pragma unroll
  for (int t = 0; t < T; ++t) x[t] = a.x + (t0 + min(t, t_count - 1)) * a.x_stride;
  const int64_t group_count = (a.n + kRowsPerWarp - 1) / kRowsPerWarp;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * kGemvWarps + warp) * a.groups_per_warp;
  const int64_t end = min(group_count, first + a.groups_per_warp);
  for (int64_t g = first; g < end; ++g) {
    const int64_t row = g * kRowsPerWarp + lane / 4;
    const uint8_t* w = a.w + static_cast<size_t>(min(row, a.n - 1)) * a.w_stride;
    float s[T][4] = {};
#pragma unroll 4
    for (int64_t k = 4 * c; k < a.cols; k += 16) {
      const float4 wv = weights4<kT>(w, k);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const float4 xv = __ldg(reinterpret_cast<const float4*>(x[t] + k));
        s[t][0] = __fmaf_rn(wv.x, xv.x, s[t][0]);
        s[t][1] = __fmaf_rn(wv.y, xv.y, s[t][1]);
        s[t][2] = __fmaf_rn(wv.z, xv.z, s[t][2]);
        s[t][3] = __fmaf_rn(wv.w, xv.w, s[t][3]);
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float h[4], q[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = __fadd_rn(s[t][i], __shfl_xor_sync(0xffffffffu, s[t][i], 2));  // lanes c<2: h[4c+i]
#pragma unroll
      for (int i = 0; i < 4; ++i) q[i] = __fadd_rn(h[i], __shfl_xor_sync(0xffffffffu, h[i], 1));  // lane c=0: q[i]
      const float v = __fadd_rn(__fadd_rn(q[0], q[2]), __fadd_rn(q[1], q[3]));
      if (c == 0 && row < a.n && t < t_count)
        a.out[static_cast<size_t>(t0 + t) * a.out_stride + row] = a.addend.added(v, t0 + t, row);
    }
  }
}

template <DType kT, int T>
void launch_tiles(const FloatArgs& base, int sm_count, cudaStream_t stream) {
  static const int blocks_per_sm = gemv_blocks_per_sm(gemv_float_kernel<kT, T>);
  const int64_t groups = (base.n + kRowsPerWarp - 1) / kRowsPerWarp;
  const GemvGrid g = gemv_grid(blocks_per_sm, groups, base.tokens, T, sm_count);
  FloatArgs args = base;
  args.groups_per_warp = g.units_per_warp;
  launch_kernel("exact float gemv kernel", gemv_float_kernel<kT, T>, g.grid, kGemvThreads, 0, stream, args);
}

template <DType kT>
void launch_type(const FloatArgs& args, int sm_count, cudaStream_t stream) {
  if (args.tokens == 1)
    launch_tiles<kT, 1>(args, sm_count, stream);
  else if (args.tokens == 2)
    launch_tiles<kT, 2>(args, sm_count, stream);
  else if (args.tokens <= 4)
    launch_tiles<kT, 4>(args, sm_count, stream);
  else
    launch_tiles<kT, kGemvTileTokens>(args, sm_count, stream);
}

}  // namespace

void launch_gemv_float(const TensorRef& x, const TensorRef& w, const ProductAddend& addend, const TensorRef& out,
                       int sm_count, cudaStream_t stream) {
  if (x.rows == 0 || w.rows == 0) return;
  const FloatArgs args{static_cast<const uint8_t*>(w.data),
                       w.row_stride,
                       w.rows,
                       w.cols,
                       static_cast<const float*>(x.data),
                       x.row_stride / sizeof(float),
                       x.rows,
                       static_cast<float*>(out.data),
                       out.row_stride / sizeof(float),
                       addend,
                       1};
  switch (w.dtype) {
    case DType::F32: launch_type<DType::F32>(args, sm_count, stream); break;
    case DType::F16: launch_type<DType::F16>(args, sm_count, stream); break;
    case DType::BF16: launch_type<DType::BF16>(args, sm_count, stream); break;
    default: fail(ErrorCode::Internal, "exact float gemv: weights of type ", dtype_name(w.dtype));
  }
}

}  // namespace cellm::cuda
