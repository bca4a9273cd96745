#pragma once
// Hyperparameters of a model, read from GGUF metadata (`<arch>.*` keys) plus the per-
// architecture facts that GGUF files leave implicit (Gemma 3's local RoPE base and its
// sliding-window pattern, the RoPE pair layout).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "gguf/file.h"

namespace cellm::model {

using backend::RopeLayout;

struct LayerConfig {
  int32_t window = 0;       // sliding window in tokens; 0 = full history
  float rope_base = 10000;  // per-layer: Gemma 3 uses a different base on local layers
  float rope_scale = 1;     // linear position scaling (positions are divided by it)
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name, if present
  int32_t n_layers = 0;
  int32_t n_embd = 0;
  int32_t n_ff = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;        // key length
  int32_t value_dim = 0;       // value length
  int32_t rope_dim = 0;        // leading dims of each head that RoPE rotates
  int32_t context_length = 0;  // trained context
  int32_t vocab_size = 0;
  float rms_eps = 1e-5f;
  float attention_scale = 0;  // softmax scale applied to q.k
  RopeLayout rope_layout = RopeLayout::Interleaved;
  int32_t sliding_window = 0;  // 0 when no layer is windowed
  std::vector<LayerConfig> layers;

  // Architecture traits that change the forward pass.
  bool qk_norm = false;         // RMSNorm on q and k per head (gemma3, qwen3)
  bool post_norms = false;      // extra RMSNorm after attention and after the FFN (gemma3)
  bool scale_embeddings = false;  // multiply embeddings by sqrt(n_embd) (gemma)
  bool scale_queries = false;     // the attention scale multiplies q, not q.k (gemma)
  bool gelu_ffn = false;        // GeGLU instead of SwiGLU
  bool qkv_bias = false;        // biases on q, k, v projections (qwen2)

  std::vector<int32_t> windowed_layers() const;
  std::vector<int32_t> global_layers() const;
};

// Reads and validates the hyperparameters; throws Unsupported for an architecture cellm does
// not implement and Format naming the key for missing or inconsistent values.
ModelConfig read_model_config(const gguf::File& file);

// The architectures cellm can run.
const std::vector<std::string>& supported_architectures();

}  // namespace cellm::model
