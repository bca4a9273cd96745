#pragma once
// Host-side launchers of the exact matrix-product kernels (matmul.cpp chooses between them).
// "Exact" means: the same integer and float operations, in the same order, as the CPU's
// AVX-512 matmul (backend/cpu/matmul_avx512.cpp states that contract), so a GPU output differs
// from the CPU's by nothing at all on such CPUs and by float summation order elsewhere:
//  - activations quantized by llama.cpp's rules into the format the weight type pairs with
//    (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants), bit for bit as
//    backend/cpu/quant_activations.cpp does;
//  - per block an exact integer dot product, then per output one fixed sequence of fused
//    multiply-adds: 32-element formats: acc[b % 4] = fma(float(isum_b), d_w * d_a, acc[b % 4])
//    (then fma(m_w, s_a, ...) for Q4_1/Q5_1), out = (acc0 + acc1) + (acc2 + acc3);
//    k-quants: acc = fma(float(isum_b), d_w * d_a, acc), then fma(float(minsum_b),
//    dmin_w * -d_a, acc) for Q4_K/Q5_K;
//  - F32/F16/BF16 weights: f32 activations, 16 running sums (element k to sum k % 16) reduced
//    by the fixed tree of _mm512_reduce_add_ps.
// The sequence of an output never depends on how many rows share the launch or how the work is
// tiled, so a row's result is bit-identical alone or in any batch.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/ops.h"

namespace cellm::cuda {

using backend::TensorRef;

enum class ActivationFormat { Q8_0, Q8_1, Q8_K };

// The activation format a quantized weight type multiplies; false for F32/F16/BF16 weights
// and for types the exact kernels do not handle.
bool activation_format_for(DType weight, ActivationFormat& format);
// Values per block of the format, for host and kernels alike.
__host__ __device__ constexpr int activation_block_elems(ActivationFormat format) {
  return format == ActivationFormat::Q8_K ? 256 : 32;
}

// What a product adds to each of its outputs, last, with one rounded addition: the bits of the
// product followed by an add. A bias per weight row (the same for every activation row), or a
// residual per output (MatMulAdd: out[t][n] = (x . w^T)[t][n] + residual[t][n]), not both. A
// plain bias pointer converts to one.
struct ProductAddend {
  const float* bias = nullptr;      // [weight rows]
  const float* residual = nullptr;  // activation row t's outputs at residual + t * residual_stride
  size_t residual_stride = 0;       // floats

  ProductAddend() = default;
  ProductAddend(const float* bias_per_row) : bias(bias_per_row) {}  // NOLINT: a bias is an addend
  static ProductAddend of_residual(const float* rows, size_t stride) {
    ProductAddend addend;
    addend.residual = rows, addend.residual_stride = stride;
    return addend;
  }
  // The addend of activation rows t0, t0 + 1, ... (a launch over a slice of the rows).
  ProductAddend from_row(int64_t t0) const {
    ProductAddend addend = *this;
    if (residual != nullptr) addend.residual += static_cast<size_t>(t0) * residual_stride;
    return addend;
  }
#ifdef __CUDACC__
  // Output (t, n) of the product, v, with the addend added.
  __device__ __forceinline__ float added(float v, int64_t t, int64_t n) const {
    if (bias != nullptr) return __fadd_rn(v, bias[n]);
    if (residual != nullptr) return __fadd_rn(v, residual[static_cast<size_t>(t) * residual_stride + n]);
    return v;
  }
#endif
};

// Quantized activation rows on the device. Row t: codes[t * row_stride + k]; block b's scale
// scales[t * (K / block) + b]; Q8_1 block sums sums[t * (K / 32) + b] (fp16(d * sum(codes))
// widened); Q8_K sums of 16 consecutive codes group_sums[t * (K / 16) + g].
struct QuantizedActivations {
  int8_t* codes = nullptr;
  float* scales = nullptr;
  float* sums = nullptr;
  int16_t* group_sums = nullptr;
  int64_t row_stride = 0;  // bytes, a multiple of 16
};

// Device bytes a QuantizedActivations of `rows` x `cols` needs, and the carving of `base`.
size_t quantized_activation_bytes(int64_t rows, int64_t cols);
QuantizedActivations carve_quantized_activations(void* base, int64_t rows, int64_t cols);

// Quantizes the f32 rows of x (cols a multiple of the format's block) into q.
void launch_quantize_activations(const TensorRef& x, ActivationFormat format, const QuantizedActivations& q,
                                 cudaStream_t stream);

// out = rmsnorm(x) * weight over whole rows (rms_norm's bits), and out quantized into q as
// launch_quantize_activations(out) would: the norm ahead of a product, in one launch. Rows and
// weight 16-byte aligned, cols a multiple of the format's block.
bool rms_norm_quantize_supported(const TensorRef& x, const float* weight, const TensorRef& out,
                                 ActivationFormat format);
void launch_rms_norm_quantize(const TensorRef& x, const float* weight, float eps, const TensorRef& out,
                              ActivationFormat format, const QuantizedActivations& q, cudaStream_t stream);

// out = act(gate) * up (launch_glu's bits), and out quantized into q as
// launch_quantize_activations(out) would: the activation ahead of a product, in one launch.
bool glu_quantize_supported(const TensorRef& gate, const TensorRef& up, const TensorRef& out, ActivationFormat format);
void launch_glu_quantize(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out,
                         ActivationFormat format, const QuantizedActivations& q, cudaStream_t stream);

// Whether the exact kernels take these operands: f32 activations with 16-byte aligned rows,
// a weight type they know with whole 32-element blocks per row, 16-byte aligned weight rows.
bool exact_matmul_supported(const TensorRef& x, const TensorRef& w);

// out = x . w^T (+ the addend) for any number of rows. Quantized weights read the activations
// from `q`, which must hold x quantized in w's activation format (launch_quantize_activations);
// F32/F16/BF16 weights read x. `sm_count` sizes the grid.
void launch_exact_matmul(const TensorRef& x, const QuantizedActivations& q, const TensorRef& w,
                         const ProductAddend& addend, const TensorRef& out, int sm_count, cudaStream_t stream);

}  // namespace cellm::cuda
