// Activation quantization on the GPU, bit for bit what backend/cpu/quant_activations.cpp
// produces (llama.cpp's rules): the same float operations with explicit IEEE rounding
// (__fdiv_rn, __fmul_rn: no fused or approximate arithmetic), round-half-to-even codes, fp16
// conversions with round-to-nearest-even. Maxima are exact in any order; integer sums too.
//  - Q8_0 / Q8_1 (32 values): d = fp16(amax / 127), codes = rint(x * (127 / amax)), and for
//    Q8_1 s = fp16((amax / 127) * sum(codes)). Eight lanes per block, four values each.
//  - Q8_K (256 values): the first value of largest magnitude m sets scale = -127 / m, codes =
//    min(127, rint(scale * x)), d = 1 / scale, plus the sum of every 16 codes. One warp per
//    block, eight values per lane.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/matmul_kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ float fp16_round(float v) { return __half2float(__float2half_rn(v)); }

__device__ __forceinline__ uint32_t pack_codes(int a, int b, int c, int d) {
  return (static_cast<uint32_t>(a) & 0xffu) | ((static_cast<uint32_t>(b) & 0xffu) << 8) |
         ((static_cast<uint32_t>(c) & 0xffu) << 16) | ((static_cast<uint32_t>(d) & 0xffu) << 24);
}

// One 32-value block per 8 lanes.
template <bool kWithSums>
__global__ void __launch_bounds__(kThreads) quantize_q8_32(const float* x, size_t x_stride, int64_t rows,
                                                            int blocks, QuantizedActivations q) {
  // Every lane takes part in the shuffles; lanes past the end work on the last block and store
  // nothing.
  const int64_t wanted = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 8;  // (row, block)
  const bool valid = wanted < rows * blocks;
  const int64_t item = valid ? wanted : rows * blocks - 1;
  const int64_t t = item / blocks;
  const int b = static_cast<int>(item % blocks);
  const int part = threadIdx.x % 8;
  const float4 v = *reinterpret_cast<const float4*>(x + t * x_stride + 32 * b + 4 * part);
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d_exact = __fdiv_rn(amax, 127.0f);
  const float inverse = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  const int c0 = __float2int_rn(__fmul_rn(v.x, inverse)), c1 = __float2int_rn(__fmul_rn(v.y, inverse));
  const int c2 = __float2int_rn(__fmul_rn(v.z, inverse)), c3 = __float2int_rn(__fmul_rn(v.w, inverse));
  int sum = c0 + c1 + c2 + c3;
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (!valid) return;
  *reinterpret_cast<uint32_t*>(q.codes + t * q.row_stride + 32 * b + 4 * part) = pack_codes(c0, c1, c2, c3);
  if (part == 0) {
    q.scales[t * blocks + b] = fp16_round(d_exact);
    if constexpr (kWithSums) q.sums[t * blocks + b] = fp16_round(__fmul_rn(d_exact, static_cast<float>(sum)));
  }
}

// One 256-value block per warp.
__global__ void __launch_bounds__(kThreads) quantize_q8_k(const float* x, size_t x_stride, int64_t rows, int blocks,
                                                           QuantizedActivations q) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;  // (row, block)
  if (item >= rows * blocks) return;
  const int64_t t = item / blocks;
  const int b = static_cast<int>(item % blocks);
  const int lane = threadIdx.x % 32;
  const float* src = x + t * x_stride + 256 * b + 8 * lane;
  const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
  const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  // The first element of that magnitude gives the sign, as the CPU's sequential scan finds it.
  int first = 256;
  float mine = 0.0f;
#pragma unroll
  for (int i = 7; i >= 0; --i) {
    if (fabsf(v[i]) == amax) {
      first = 8 * lane + i;
      mine = v[i];
    }
  }
  int first_all = first;
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) first_all = min(first_all, __shfl_xor_sync(0xffffffffu, first_all, m));
  const float signed_max = __shfl_sync(0xffffffffu, mine, first_all / 8 % 32);
  int8_t* codes = q.codes + t * q.row_stride + 256 * b + 8 * lane;
  int16_t* group_sums = q.group_sums + t * (static_cast<int64_t>(blocks) * 16) + 16 * b;
  if (amax == 0.0f) {
    *reinterpret_cast<uint2*>(codes) = make_uint2(0, 0);
    if (lane % 2 == 0) group_sums[lane / 2] = 0;
    if (lane == 0) q.scales[t * blocks + b] = 0.0f;
    return;
  }
  const float inverse = __fdiv_rn(-127.0f, signed_max);
  int c[8];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = static_cast<int>(fminf(127.0f, rintf(__fmul_rn(inverse, v[i]))));
    sum += c[i];
  }
  *reinterpret_cast<uint2*>(codes) = make_uint2(pack_codes(c[0], c[1], c[2], c[3]), pack_codes(c[4], c[5], c[6], c[7]));
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  if (lane % 2 == 0) group_sums[lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) q.scales[t * blocks + b] = __fdiv_rn(1.0f, inverse);
}

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

bool activation_format_for(DType weight, ActivationFormat& format) {
  switch (weight) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: format = ActivationFormat::Q8_0; return true;
    case DType::Q4_1:
    case DType::Q5_1: format = ActivationFormat::Q8_1; return true;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: format = ActivationFormat::Q8_K; return true;
    default: return false;
  }
}

int activation_block_elems(ActivationFormat format) { return format == ActivationFormat::Q8_K ? 256 : 32; }

size_t quantized_activation_bytes(int64_t rows, int64_t cols) {
  const auto elems = static_cast<size_t>(rows * cols);
  return align16(elems) + 2 * align16(elems / 32 * sizeof(float)) + align16(elems / 16 * sizeof(int16_t));
}

QuantizedActivations carve_quantized_activations(void* base, int64_t rows, int64_t cols) {
  const auto elems = static_cast<size_t>(rows * cols);
  auto* p = static_cast<char*>(base);
  QuantizedActivations q;
  q.codes = reinterpret_cast<int8_t*>(p);
  p += align16(elems);
  q.scales = reinterpret_cast<float*>(p);
  p += align16(elems / 32 * sizeof(float));
  q.sums = reinterpret_cast<float*>(p);
  p += align16(elems / 32 * sizeof(float));
  q.group_sums = reinterpret_cast<int16_t*>(p);
  q.row_stride = cols;
  return q;
}

void launch_quantize_activations(const TensorRef& x, ActivationFormat format, const QuantizedActivations& q,
                                 cudaStream_t stream) {
  const int block = activation_block_elems(format);
  if (x.dtype != DType::F32 || x.cols % block != 0 || x.row_stride % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x.data) % 16 != 0 || q.row_stride < x.cols || q.row_stride % 16 != 0)
    fail(ErrorCode::Internal, "activation quantization of ", x.rows, " x ", x.cols, " values (block ", block, ")");
  if (x.rows == 0) return;
  const int blocks = static_cast<int>(x.cols / block);
  const int64_t items = x.rows * blocks;
  const auto* src = static_cast<const float*>(x.data);
  const size_t stride = x.row_stride / sizeof(float);
  if (format == ActivationFormat::Q8_K) {
    quantize_q8_k<<<static_cast<unsigned>((items + kWarps - 1) / kWarps), kThreads, 0, stream>>>(src, stride, x.rows,
                                                                                                 blocks, q);
  } else {
    const auto grid = static_cast<unsigned>((items * 8 + kThreads - 1) / kThreads);
    if (format == ActivationFormat::Q8_1)
      quantize_q8_32<true><<<grid, kThreads, 0, stream>>>(src, stride, x.rows, blocks, q);
    else
      quantize_q8_32<false><<<grid, kThreads, 0, stream>>>(src, stride, x.rows, blocks, q);
  }
  check_launch("activation quantization kernel");
}

}  // namespace cellm::cuda
