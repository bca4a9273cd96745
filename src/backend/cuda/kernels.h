#pragma once
// Host-side launchers of the CUDA kernels, one .cu file per concept. Each enqueues work on
// `stream` and returns at once: no host synchronisation and no allocation, so a sequence of
// launches can be captured into a CUDA graph. Pointers are device addresses; shapes and
// strides come by value.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/matmul_kernels.h"
#include "backend/cuda/rope_table.h"
#include "backend/ops.h"

namespace cellm::cuda {

using backend::TensorRef;

// Every launcher below lets its kernel start before the kernel ahead of it has finished
// (kernel_launch.cuh) where early launches are on for the calling thread. They pay in steps of
// few rows, whose kernels are short and mostly one wave; in steps of many rows they cost more
// than they save. Measured on an H200, one run each
// (tok/s, no early launches -> early launches): llama3-8b Q4_K batch 1 329.2 -> 373.3, batch 64
// 2196 -> 1997 (1928 with attention and the tiled product never triggering early); SmolLM2's
// shape batch 8 4025 -> 4394. The executor says how wide each forward is (Backend::begin_forward)
// and the CUDA backend turns early launches on for this thread's launches up to this width.
inline constexpr int64_t kEarlyLaunchMaxRows = 16;
void set_early_launches(bool on);  // for this thread's launches from now on

// out[t] = dequantize(table[tokens[t]]) * scale; a token outside the table gives a zero row.
void launch_embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out,
                  cudaStream_t stream);
void launch_rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out,
                     cudaStream_t stream);
// `table`: the angles' cos/sin for positions below kRopeTablePositions (rope_table.h), or null.
void launch_rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params, const float2* table,
                 cudaStream_t stream);
// rope(x) then kv_store(k, v) in one launch, where k is whole rotated heads of x (every dim
// rotated) and the pool holds plain values: the threads that rotate K's pairs store them too.
bool rope_kv_store_fusable(const TensorRef& x, const backend::RopeParams& p, const TensorRef& k, const TensorRef& v,
                           const backend::KvDestination& dst);
void launch_rope_kv_store(const TensorRef& x, const int32_t* positions, const backend::RopeParams& p,
                          const float2* table, const TensorRef& k, const TensorRef& v,
                          const backend::KvDestination& dst, cudaStream_t stream);
void launch_kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst,
                     cudaStream_t stream);
// The angles of these parameters (rope_rules.cuh), for the kernels that rotate as rope.cu does.
rope::Angles rope_angles(const backend::RopeParams& p, const float2* table);
// Whether this build holds machine code (or PTX) the current device can run.
cudaError_t probe_kernel_image();

void launch_add(const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream);
void launch_glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out,
                cudaStream_t stream);
// out[t][n] += bias[n]
void launch_add_bias(const TensorRef& out, const float* bias, cudaStream_t stream);
// out[i] = x[rows[i]]; a row index outside x gives a zero row.
void launch_gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out, cudaStream_t stream);
// A decode step's rows (up to kArgmaxSplitMaxRows) are split over blocks that count themselves
// in `workspace` (argmax.cu); without one, or for more rows, a block per row.
inline constexpr int64_t kArgmaxSplitMaxRows = 256;
inline constexpr int kArgmaxMaxParts = 64;
struct ArgmaxWorkspace {
  void* bests = nullptr;         // kArgmaxSplitMaxRows x kArgmaxMaxParts 8-byte candidates
  unsigned* arrivals = nullptr;  // kArgmaxSplitMaxRows counters, zero between launches
};
void launch_argmax_rows(const TensorRef& logits, int32_t* out, const ArgmaxWorkspace& workspace, cudaStream_t stream);

// --- matrix products (matmul.cpp chooses; the exact kernels are in matmul_kernels.h) -------
// Rows [row0, row0 + rows) of weight w as dense bf16, `w.cols` elements per row, contiguous.
void launch_dequantize_bf16(const TensorRef& w, int64_t row0, int64_t rows, void* dst, cudaStream_t stream);
// Rows [row0, row0 + rows) of the f32 activations x as dense bf16, contiguous.
void launch_convert_bf16(const TensorRef& x, int64_t row0, int64_t rows, void* dst, cudaStream_t stream);

// --- attention ---------------------------------------------------------------------------------
// In the order of backend/attention_order.h (the CPU's bits). A long context of a few rows is
// split over blocks whose per-chunk results go to `partials`, folded by the last of them;
// attention_partials_floats() is the workspace the backend allocates (smaller is allowed: rows
// that do not fit fold in place, slower, same bits).
struct AttentionWorkspace {
  float* partials = nullptr;
  size_t capacity_floats = 0;
  unsigned* arrivals = nullptr;  // attention_arrival_count() counters, zero between launches
  size_t arrival_count = 0;
  int sm_count = 1;
};
inline constexpr int kAttentionMaxHeadDim = 256;
inline constexpr int kAttentionMaxGroupDims = 4096;  // query heads per KV head x head_dim
size_t attention_partials_floats();
size_t attention_arrival_count();  // enough for every (row, head) that fits the partials
// The output row quantized as launch_quantize_activations(out) would, beside the float row: the
// activations of the product that follows (the output projection), in the same launch.
struct AttentionQuantizedOut {
  ActivationFormat format;
  QuantizedActivations q;
};
// Whether launch_attention can write this output quantized in `format` (each block quantizes
// the heads it writes, which must be whole blocks of the format).
bool attention_quantize_supported(const TensorRef& q, const backend::PagedKv& kv, const TensorRef& out,
                                  ActivationFormat format, const AttentionWorkspace& workspace);
// A decode step's rotary embedding and K/V store, folded into its attention (one launch fewer
// per layer): q's rows come unrotated; row t's new key (k_new, whole heads, every dim rotating)
// and value (v_new) are rotated, stored at pool row dst.cells[t] (< 0: nowhere) and attended to
// as that cell, with the bits of rope_kv_store then attention. Each row must be one sequence's
// only new token (its step writes no other cell it sees).
struct AttentionRope {
  const float* k_new = nullptr;
  size_t k_stride = 0;  // floats
  const float* v_new = nullptr;
  size_t v_stride = 0;  // floats
  rope::Angles angles{};
  bool interleaved = false;
  backend::KvDestination dst;  // dst.cells null: no rope (the kernel's Args)
};
// Whether launch_attention takes `rope` for this step (its staged kernel does: few rows).
bool attention_rope_supported(const TensorRef& q, const backend::PagedKv& kv, const AttentionRope& rope,
                              const AttentionWorkspace& workspace);
void launch_attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                      const TensorRef& out, const AttentionWorkspace& workspace, const AttentionQuantizedOut* quantized,
                      cudaStream_t stream, const AttentionRope* rope = nullptr);

}  // namespace cellm::cuda
