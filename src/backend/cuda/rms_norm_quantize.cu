// RMSNorm whose output feeds a matrix product that quantizes its activations in a kernel of
// their own: this kernel normalizes the row (rms_norm_row.cuh: rms_norm.cu's bits) and, with
// the normalized values still in registers, quantizes them as quantize_activations.cu would
// (quantize_rules.cuh), writing both. One launch and one pass over the row fewer per product.
// A Q8_K block per warp (eight values per lane), or a 32-value block per eight lanes (four
// values each). A decode step's few rows are each split over several CTAs (grid.x; each finds
// the row's factor itself, the same bits), a quantized block per warp or lane group: one CTA
// per row quantized a 4096-wide row two Q8_K blocks per warp in turn (llama3-8b Q4_K batch 1,
// H200, one run: 3.65 -> 3.0 us per call on the critical path, step 2066.5 -> 2023.2 us).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/matmul_kernels.h"
#include "backend/cuda/quantize_rules.cuh"
#include "backend/cuda/rms_norm_row.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using norm::kThreads;
using norm::kWarps;

struct NormArgs {
  const float* x;
  size_t x_stride;  // floats
  const float* weight;
  int cols;
  float eps;
  float* out;
  size_t out_stride;  // floats
  QuantizedActivations q;
  int blocks_per_cta;  // quantized blocks of a row per CTA
};

// Rows up to this many are split over CTAs; a prefill's rows fill the device as they are.
constexpr int64_t kSplitRows = 32;

template <ActivationFormat kFormat>
__global__ void __launch_bounds__(kThreads) rms_norm_quantize_kernel(NormArgs a) {
  allow_next_kernel();
  prefetch_read_only(a.weight, sizeof(float) * static_cast<size_t>(a.cols));
  wait_for_inputs();
  const int64_t t = blockIdx.y;
  const float* xr = a.x + t * a.x_stride;
  float* yr = a.out + t * a.out_stride;
  const float inv = norm::inverse_rms(xr, a.cols, a.eps);
  // The normalized values, four at a time: (x * inv) * w, each product rounded.
  const auto normed = [&](int at) {
    const float4 x = *reinterpret_cast<const float4*>(xr + at), w = *reinterpret_cast<const float4*>(a.weight + at);
    return make_float4(norm::scaled(x.x, inv, w.x), norm::scaled(x.y, inv, w.y), norm::scaled(x.z, inv, w.z),
                       norm::scaled(x.w, inv, w.w));
  };
  // This CTA's quantized blocks: [begin, end) of the row's.
  const int begin = static_cast<int>(blockIdx.x) * a.blocks_per_cta;
  if constexpr (kFormat == ActivationFormat::Q8_K) {
    const int blocks = a.cols / 256, end = min(blocks, begin + a.blocks_per_cta);
    for (int b = begin + static_cast<int>(threadIdx.x) / 32; b < end; b += kWarps)  // warp-uniform: the whole warp quantizes
      quantize::produce_q8_k(normed, yr, a.q, t, b, blocks, static_cast<int>(threadIdx.x % 32));
  } else {
    constexpr int kPerPass = kThreads / 8;  // 32-value blocks per pass, eight lanes each
    const int blocks = a.cols / 32, end = min(blocks, begin + a.blocks_per_cta);
    for (int first = begin; first < end; first += kPerPass) {  // block-uniform: every lane shuffles
      const int wanted = first + static_cast<int>(threadIdx.x) / 8;
      quantize::produce_q8_32<kFormat == ActivationFormat::Q8_1>(normed, yr, wanted < end, a.q, t,
                                                                 min(wanted, blocks - 1),  // past the end: the last block, unstored
                                                                 blocks, static_cast<int>(threadIdx.x % 8));
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool rms_norm_quantize_supported(const TensorRef& x, const float* weight, const TensorRef& out,
                                 ActivationFormat format) {
  return x.dtype == DType::F32 && out.dtype == DType::F32 && x.rows == out.rows && x.cols == out.cols &&
         x.cols % activation_block_elems(format) == 0 && x.cols <= (1 << 30) && x.rows <= 65535 && aligned16(x.data) &&
         aligned16(out.data) && aligned16(weight) && x.row_stride % 16 == 0 && out.row_stride % 16 == 0;
}

void launch_rms_norm_quantize(const TensorRef& x, const float* weight, float eps, const TensorRef& out,
                              ActivationFormat format, const QuantizedActivations& q, cudaStream_t stream) {
  if (!rms_norm_quantize_supported(x, weight, out, format))
    fail(ErrorCode::Internal, "rms_norm_quantize: unsupported operands (", x.rows, " x ", x.cols, ")");
  if (x.rows == 0) return;
  // Split rows: a CTA per kWarps Q8_K blocks or per pass of 32-value blocks (kThreads / 8).
  const int blocks = static_cast<int>(x.cols / activation_block_elems(format));
  const int per_cta = x.rows <= kSplitRows ? (format == ActivationFormat::Q8_K ? kWarps : kThreads / 8) : blocks;
  const NormArgs args{static_cast<const float*>(x.data), x.row_stride / sizeof(float), weight,
                      static_cast<int>(x.cols),          eps,
                      static_cast<float*>(out.data),     out.row_stride / sizeof(float),
                      q,                                 per_cta};
  const dim3 grid(static_cast<unsigned>((blocks + per_cta - 1) / per_cta), static_cast<unsigned>(x.rows));
  switch (format) {
    case ActivationFormat::Q8_K:
      launch_kernel("rms_norm_quantize kernel", rms_norm_quantize_kernel<ActivationFormat::Q8_K>, grid, kThreads, 0,
                    stream, args);
      break;
    case ActivationFormat::Q8_1:
      launch_kernel("rms_norm_quantize kernel", rms_norm_quantize_kernel<ActivationFormat::Q8_1>, grid, kThreads, 0,
                    stream, args);
      break;
    case ActivationFormat::Q8_0:
      launch_kernel("rms_norm_quantize kernel", rms_norm_quantize_kernel<ActivationFormat::Q8_0>, grid, kThreads, 0,
                    stream, args);
      break;
  }
}

}  // namespace cellm::cuda
