// Weight-streaming matrix product for few activation rows (decode): each warp owns R output
// features and walks their weight rows once, 32-element units at a time (four lanes per unit,
// weight_units.cuh), for up to kGemvMaxTile activation rows. Memory traffic is the weights plus
// activations that stay in L1/L2.
//  - Quantized weights: the lane's eight quants as int8 bytes (weight_units_int8.cuh) meet
//    the activations quantized to int8 per unit (quantize_activations.cu) in two __dp4a; the
//    unit's weight scale, activation scale and offset are applied once per eight products.
//  - F32/F16/BF16 weights: widened to f32 and multiplied with the f32 activations.
//
// Reduction order per output: each lane sums its units in row order, then the warp combines
// lanes with a fixed butterfly. Nothing depends on how many activation rows share the launch,
// so a row's result is the same alone or in a batch.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plain_values.cuh"
#include "backend/cuda/weight_units_int8.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kUnitsPerStep = 32 / kLanesPerUnit;

// Output features per warp: activations loaded once serve all of them, and more rows mean more
// independent weight loads in flight; wide activation tiles need the registers for themselves.
__host__ __device__ constexpr int rows_per_warp(int t) { return t <= 2 ? 4 : 2; }

struct GemvArgs {
  const uint8_t* w;
  size_t w_stride;  // bytes
  int64_t n;        // output features
  int units;        // K / 32
  const float* x;
  size_t x_stride;  // floats
  QuantizedRows xq;  // x quantized (quantized weights only), rows from this tile's first
  int t_count;       // activation rows in this launch (<= T)
  float* out;
  size_t out_stride;  // floats
  const float* bias;
};

__device__ __forceinline__ float dot8(const float (&w)[8], const float4& a, const float4& b, float acc) {
  acc = fmaf(w[0], a.x, acc);
  acc = fmaf(w[1], a.y, acc);
  acc = fmaf(w[2], a.z, acc);
  acc = fmaf(w[3], a.w, acc);
  acc = fmaf(w[4], b.x, acc);
  acc = fmaf(w[5], b.y, acc);
  acc = fmaf(w[6], b.z, acc);
  acc = fmaf(w[7], b.w, acc);
  return acc;
}

// The warp's R weight rows; rows past the end repeat the last one (computed, not stored).
template <int R>
__device__ __forceinline__ void warp_weight_rows(const GemvArgs& a, int64_t n0, const uint8_t* (&wrow)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) wrow[r] = a.w + static_cast<size_t>(min(n0 + r, a.n - 1)) * a.w_stride;
}

// Reduces each accumulator over the warp and stores it (+ bias).
template <int R, int T>
__device__ __forceinline__ void store_rows(const GemvArgs& a, int64_t n0, int lane, float (&acc)[R][T]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0 && n0 + r < a.n && t < a.t_count) {
        if (a.bias != nullptr) v += a.bias[n0 + r];
        a.out[static_cast<size_t>(t) * a.out_stride + n0 + r] = v;
      }
    }
  }
}

template <class Unit, int T>
__global__ void __launch_bounds__(kThreads) gemv_quantized_kernel(GemvArgs a) {
  using Q = QuantBytes<Unit>;
  constexpr int R = rows_per_warp(T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (n0 >= a.n) return;
  const int q = lane % kLanesPerUnit;
  const uint8_t* wrow[R];
  warp_weight_rows(a, n0, wrow);
  int64_t xrow[T];  // rows past t_count repeat the last one (computed, not stored)
#pragma unroll
  for (int t = 0; t < T; ++t) xrow[t] = min(t, a.t_count - 1);
  float acc[R][T] = {};

#pragma unroll(T <= 2 ? 2 : 1)
  for (int u = lane / kLanesPerUnit; u < a.units; u += kUnitsPerStep) {
    const int e0 = kUnitElems * u + unit_offset<Unit::kSplit>(q, 0);
    const int e1 = kUnitElems * u + unit_offset<Unit::kSplit>(q, 4);
    int x_lo[T], x_hi[T];
    float x_scale[T], x_sum[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const int8_t* values = a.xq.values + xrow[t] * a.xq.row_stride;
      x_lo[t] = __ldg(reinterpret_cast<const int*>(values + e0));
      x_hi[t] = __ldg(reinterpret_cast<const int*>(values + e1));
      x_scale[t] = __ldg(a.xq.scales + xrow[t] * a.units + u);
      // The unit's offset times the sum of its activations: added once, by the unit's lane 0.
      if constexpr (Q::kHasOffset) x_sum[t] = q == 0 ? __ldg(a.xq.sums + xrow[t] * a.units + u) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t lo, hi;
      float scale, offset;
      Q::decode(wrow[r], u, q, lo, hi, scale, offset);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const int dot = __dp4a(static_cast<int>(hi), x_hi[t], __dp4a(static_cast<int>(lo), x_lo[t], 0));
        acc[r][t] = fmaf(scale * x_scale[t], static_cast<float>(dot), acc[r][t]);
        if constexpr (Q::kHasOffset) acc[r][t] = fmaf(offset, x_sum[t], acc[r][t]);
      }
    }
  }
  store_rows<R, T>(a, n0, lane, acc);
}

template <class Unit, int T>
__global__ void __launch_bounds__(kThreads) gemv_plain_kernel(GemvArgs a) {
  constexpr int R = rows_per_warp(T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (n0 >= a.n) return;
  const int q = lane % kLanesPerUnit;
  const uint8_t* wrow[R];
  warp_weight_rows(a, n0, wrow);
  const float* xrow[T];
#pragma unroll
  for (int t = 0; t < T; ++t) xrow[t] = a.x + static_cast<size_t>(min(t, a.t_count - 1)) * a.x_stride;
  float acc[R][T] = {};

#pragma unroll(T <= 2 ? 2 : 1)
  for (int u = lane / kLanesPerUnit; u < a.units; u += kUnitsPerStep) {
    const int e0 = kUnitElems * u + 8 * q;
    float4 xa[T], xb[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      xa[t] = __ldg(reinterpret_cast<const float4*>(xrow[t] + e0));
      xb[t] = __ldg(reinterpret_cast<const float4*>(xrow[t] + e0 + 4));
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float w[kLaneElems];
      Unit::decode(wrow[r], u, q, w);
#pragma unroll
      for (int t = 0; t < T; ++t) acc[r][t] = dot8(w, xa[t], xb[t], acc[r][t]);
    }
  }
  store_rows<R, T>(a, n0, lane, acc);
}

template <class Unit, int T>
void launch_rows(const GemvArgs& args, cudaStream_t stream) {
  constexpr int R = rows_per_warp(T);
  const int64_t warps = (args.n + R - 1) / R;
  const dim3 grid(static_cast<unsigned>((warps + kWarps - 1) / kWarps));
  if constexpr (std::is_same_v<Unit, UnitF32> || std::is_same_v<Unit, UnitF16> || std::is_same_v<Unit, UnitBF16>)
    gemv_plain_kernel<Unit, T><<<grid, kThreads, 0, stream>>>(args);
  else
    gemv_quantized_kernel<Unit, T><<<grid, kThreads, 0, stream>>>(args);
}

template <class Unit>
void launch_tile(const GemvArgs& args, cudaStream_t stream) {
  if (args.t_count == 1)
    launch_rows<Unit, 1>(args, stream);
  else if (args.t_count == 2)
    launch_rows<Unit, 2>(args, stream);
  else if (args.t_count <= 4)
    launch_rows<Unit, 4>(args, stream);
  else
    launch_rows<Unit, kGemvMaxTile>(args, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_wants_quantized(const TensorRef& w) { return !is_plain(w.dtype); }

bool gemv_supported(const TensorRef& x, const TensorRef& w) {
  return x.dtype == DType::F32 && w.cols % kUnitElems == 0 && w.cols <= int64_t{1} << 30 && aligned16(x.data) &&
         x.row_stride % 16 == 0 && aligned16(w.data) && w.row_stride % 16 == 0 &&
         visit_unit_format(w.dtype, [](auto) {});
}

void launch_gemv(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out,
                 const QuantizedRows& quantized, cudaStream_t stream) {
  if (!gemv_supported(x, w)) fail(ErrorCode::Internal, "gemv: unsupported operands (", dtype_name(w.dtype), ")");
  if (out.rows == 0 || w.rows == 0) return;
  const bool quantize = gemv_wants_quantized(w);
  if (quantize) {
    if (quantized.values == nullptr || quantized.row_stride < w.cols)
      fail(ErrorCode::Internal, "gemv: no room for the quantized activations");
    launch_quantize_activations(x, quantized, stream);
  }
  const int units = static_cast<int>(w.cols / kUnitElems);
  GemvArgs args{static_cast<const uint8_t*>(w.data), w.row_stride, w.rows, units, nullptr,
                x.row_stride / sizeof(float), quantized, 0, nullptr, out.row_stride / sizeof(float), bias};
  for (int64_t t0 = 0; t0 < out.rows; t0 += kGemvMaxTile) {
    args.x = x.row<const float>(t0);
    if (quantize) {
      args.xq.values = quantized.values + t0 * quantized.row_stride;
      args.xq.scales = quantized.scales + t0 * units;
      args.xq.sums = quantized.sums + t0 * units;
    }
    args.out = out.row<float>(t0);
    args.t_count = static_cast<int>(std::min<int64_t>(kGemvMaxTile, out.rows - t0));
    visit_unit_format(w.dtype, [&]<class Unit>(Unit) { launch_tile<Unit>(args, stream); });
  }
  check_launch("gemv kernel");
}

}  // namespace cellm::cuda
