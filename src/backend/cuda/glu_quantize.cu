// The gated activation whose output feeds a matrix product that quantizes its activations in a
// kernel of their own (llama's FFN down projection, 14336 wide): this kernel computes
// act(gate) * up (glu_rules.cuh: elementwise.cu's bits) and, with the values still in
// registers, quantizes them as quantize_activations.cu would (quantize_rules.cuh), writing both.
// One launch and one pass over the row fewer per product. A Q8_K block per warp (eight values
// per lane), or a 32-value block per eight lanes (four values each); rows on grid.y.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/glu_rules.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/matmul_kernels.h"
#include "backend/cuda/quantize_rules.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

struct GluArgs {
  const float* gate;
  size_t gate_stride;  // floats
  const float* up;
  size_t up_stride;  // floats
  float* out;
  size_t out_stride;  // floats
  int cols;
  QuantizedActivations q;
};

template <backend::GluActivation kAct, ActivationFormat kFormat>
__global__ void __launch_bounds__(kThreads) glu_quantize_kernel(GluArgs a) {
  allow_next_kernel();
  glu::prefetch_tables<kAct>();
  wait_for_inputs();
  const int64_t t = blockIdx.y;
  const float* g = a.gate + t * a.gate_stride;
  const float* u = a.up + t * a.up_stride;
  float* y = a.out + t * a.out_stride;
  // act(gate) * up, four values at a time.
  const auto gated = [&](int at) {
    const float4 gv = *reinterpret_cast<const float4*>(g + at), uv = *reinterpret_cast<const float4*>(u + at);
    return make_float4(glu::gated<kAct>(gv.x, uv.x), glu::gated<kAct>(gv.y, uv.y), glu::gated<kAct>(gv.z, uv.z),
                       glu::gated<kAct>(gv.w, uv.w));
  };
  if constexpr (kFormat == ActivationFormat::Q8_K) {
    const int blocks = a.cols / 256;
    const int b = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32;
    if (b >= blocks) return;  // warp-uniform: the whole warp quantizes
    quantize::produce_q8_k(gated, y, a.q, t, b, blocks, static_cast<int>(threadIdx.x % 32));
  } else {
    const int blocks = a.cols / 32;
    const int wanted = static_cast<int>(blockIdx.x) * (kThreads / 8) + static_cast<int>(threadIdx.x) / 8;
    quantize::produce_q8_32<kFormat == ActivationFormat::Q8_1>(gated, y, wanted < blocks, a.q, t,
                                                               min(wanted, blocks - 1),  // past the end: the last block, unstored
                                                               blocks, static_cast<int>(threadIdx.x % 8));
  }
}

template <backend::GluActivation kAct>
void launch_format(const GluArgs& args, ActivationFormat format, unsigned rows, cudaStream_t stream) {
  const int blocks = args.cols / activation_block_elems(format);
  const unsigned per_launch_block = format == ActivationFormat::Q8_K ? kWarps : kThreads / 8;
  const dim3 grid((static_cast<unsigned>(blocks) + per_launch_block - 1) / per_launch_block, rows);
  switch (format) {
    case ActivationFormat::Q8_K:
      launch_kernel("glu_quantize kernel", glu_quantize_kernel<kAct, ActivationFormat::Q8_K>, grid, kThreads, 0, stream,
                    args);
      break;
    case ActivationFormat::Q8_1:
      launch_kernel("glu_quantize kernel", glu_quantize_kernel<kAct, ActivationFormat::Q8_1>, grid, kThreads, 0, stream,
                    args);
      break;
    case ActivationFormat::Q8_0:
      launch_kernel("glu_quantize kernel", glu_quantize_kernel<kAct, ActivationFormat::Q8_0>, grid, kThreads, 0, stream,
                    args);
      break;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool glu_quantize_supported(const TensorRef& gate, const TensorRef& up, const TensorRef& out, ActivationFormat format) {
  for (const TensorRef* t : {&gate, &up, &out})
    if (t->dtype != DType::F32 || !aligned16(t->data) || t->row_stride % 16 != 0 || t->rows != out.rows ||
        t->cols != out.cols)
      return false;
  return out.cols % activation_block_elems(format) == 0 && out.cols <= (int64_t{1} << 30) && out.rows <= 65535;
}

void launch_glu_quantize(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out,
                         ActivationFormat format, const QuantizedActivations& q, cudaStream_t stream) {
  if (!glu_quantize_supported(gate, up, out, format))
    fail(ErrorCode::Internal, "glu_quantize: unsupported operands (", out.rows, " x ", out.cols, ")");
  if (out.rows == 0) return;
  const GluArgs args{static_cast<const float*>(gate.data), gate.row_stride / sizeof(float),
                     static_cast<const float*>(up.data),   up.row_stride / sizeof(float),
                     static_cast<float*>(out.data),        out.row_stride / sizeof(float),
                     static_cast<int>(out.cols),           q};
  const auto rows = static_cast<unsigned>(out.rows);
  if (act == backend::GluActivation::Silu)
    launch_format<backend::GluActivation::Silu>(args, format, rows, stream);
  else
    launch_format<backend::GluActivation::GeluTanh>(args, format, rows, stream);
}

}  // namespace cellm::cuda
