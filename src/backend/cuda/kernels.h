#pragma once
// Host-side launchers of the CUDA kernels, one .cu file per concept. Each enqueues work on
// `stream` and returns at once: no host synchronisation and no allocation, so a sequence of
// launches can be captured into a CUDA graph. Pointers are device addresses; shapes and
// strides come by value.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/ops.h"

namespace cellm::cuda {

using backend::TensorRef;

// out[t] = dequantize(table[tokens[t]]) * scale; a token outside the table gives a zero row.
void launch_embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out,
                  cudaStream_t stream);
void launch_rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out,
                     cudaStream_t stream);
void launch_rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params,
                 cudaStream_t stream);
void launch_kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst,
                     cudaStream_t stream);
// Whether this build holds machine code (or PTX) the current device can run.
cudaError_t probe_kernel_image();

void launch_add(const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream);
void launch_glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out,
                cudaStream_t stream);
// out[t][n] += bias[n]
void launch_add_bias(const TensorRef& out, const float* bias, cudaStream_t stream);
// out[i] = x[rows[i]]; a row index outside x gives a zero row.
void launch_gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out, cudaStream_t stream);
void launch_argmax_rows(const TensorRef& logits, int32_t* out, cudaStream_t stream);

// --- matrix products (matmul.cpp chooses between them) ---------------------------------------
// Activations quantized per 32-element unit for the integer GEMV (quantize_activations.cu):
// row t, unit u has int8 values[t * row_stride + 32u ...], scale scales[t * units + u] and
// scaled sum sums[t * units + u] (scale * the sum of its values).
struct QuantizedRows {
  int8_t* values = nullptr;
  float* scales = nullptr;
  float* sums = nullptr;
  int64_t row_stride = 0;  // bytes
};
void launch_quantize_activations(const TensorRef& x, const QuantizedRows& q, cudaStream_t stream);

// Weight-streaming product for few rows: out[t] = x[t] . w^T (+ bias), any T (processed in
// groups of at most kGemvMaxTile rows, each group streaming the weights once). Requires
// gemv_supported(). Quantized weights meet activations quantized to 8 bits per 32 (as the CPU
// does) in integer dot products: `quantized` must hold x's rows (gemv_wants_quantized()); plain
// weights (F32, F16, BF16) use f32 activations. A row's result does not depend on T.
inline constexpr int kGemvMaxTile = 8;
bool gemv_supported(const TensorRef& x, const TensorRef& w);
bool gemv_wants_quantized(const TensorRef& w);
void launch_gemv(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out,
                 const QuantizedRows& quantized, cudaStream_t stream);
// Rows [row0, row0 + rows) of weight w as dense bf16, `w.cols` elements per row, contiguous.
void launch_dequantize_bf16(const TensorRef& w, int64_t row0, int64_t rows, void* dst, cudaStream_t stream);
// Rows [row0, row0 + rows) of the f32 activations x as dense bf16, contiguous.
void launch_convert_bf16(const TensorRef& x, int64_t row0, int64_t rows, void* dst, cudaStream_t stream);

// --- attention --------------------------------------------------------------------------------
// The context of each row may be split over several blocks (flash-decoding); their partial
// results go to `partials` and a second kernel merges them. attention_partials_floats() is
// the most a call on a device with `sm_count` multiprocessors can need.
struct AttentionWorkspace {
  float* partials = nullptr;
  size_t capacity_floats = 0;
  int sm_count = 1;
};
inline constexpr int kAttentionMaxHeadDim = 256;
inline constexpr int kAttentionMaxGroupDims = 4096;  // query heads per KV head x head_dim
size_t attention_partials_floats(int sm_count);
void launch_attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                      const TensorRef& out, const AttentionWorkspace& workspace, cudaStream_t stream);

}  // namespace cellm::cuda
