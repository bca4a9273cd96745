#pragma once
// The vocabulary shared by Programs (model/), the executor (runtime/) and the kernels of every
// backend: tensor views and the parameters of each operation.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace cellm::backend {

// A 2-D view: `rows` rows of `cols` elements, rows `row_stride` bytes apart. Activations are
// [tokens, features]; a weight matrix is [outputs, inputs] as GGUF stores it (one row per
// output). `data` is a device address on device backends.
//
// A weight may instead lie in several places (stacked projections that a backend computes
// from where the file maps them, see Backend::place_stacked_weight): then `parts` lists
// `part_count` views of one dtype and width whose rows, in order, are this weight's rows, and
// `data` is null. Only matmul takes such a weight, and only on the backend that made it.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;
  const TensorRef* parts = nullptr;
  int32_t part_count = 0;

  template <typename T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(static_cast<char*>(data) + static_cast<size_t>(r) * row_stride);
  }
};

enum class RopeLayout {
  Interleaved,  // rotate pairs (2i, 2i+1): llama (GGUF permutes q/k weights for it)
  Neox,         // rotate pairs (i, i + rope_dim/2): gemma3, qwen2, qwen3
};

const char* rope_layout_name(RopeLayout layout);

struct RopeParams {
  int32_t n_heads = 0;
  int32_t head_dim = 0;
  int32_t rope_dim = 0;     // leading dims of each head that rotate
  float base = 10000.0f;
  float freq_scale = 1.0f;  // positions are multiplied by it (1 / linear scaling factor)
  RopeLayout layout = RopeLayout::Interleaved;
};

enum class GluActivation {
  Silu,      // SwiGLU: silu(gate) * up
  GeluTanh,  // GeGLU with the tanh approximation of GELU
};

// One layer's view of the KV pool plus the step's side buffers (kv/step_buffers.h defines them):
// row i of the step reads the pages pages[page_rows[i] .. page_rows[i+1]), each `page_size` pool
// rows, and within them the cells whose cell_pos c satisfies c <= positions[i] and, when
// window > 0, c > positions[i] - window.
struct PagedKv {
  const void* k = nullptr;  // base + k_offset(layer)
  const void* v = nullptr;  // base + v_offset(layer)
  size_t row_stride = 0;    // bytes_per_cell
  DType dtype = DType::F16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t window = 0;
  int32_t page_size = 0;
  const int32_t* cell_pos = nullptr;
  const int32_t* page_rows = nullptr;
  const int32_t* pages = nullptr;
  // The model scales the queries by the attention scale before q.k (gemma3) instead of the
  // scores (llama). Equal in real arithmetic; only ggml numerics follow the model's choice.
  bool scale_queries = false;
};

// Where a step's tokens write their K and V in one layer. A negative cell is a padding row
// (a decode step filled up to its bucket): it writes nothing.
struct KvDestination {
  void* k = nullptr;
  void* v = nullptr;
  size_t row_stride = 0;
  DType dtype = DType::F16;
  const int32_t* cells = nullptr;  // [T] pool row per token; < 0: write nothing
};

}  // namespace cellm::backend
