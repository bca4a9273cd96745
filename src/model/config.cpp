#include "model/config.h"

#include <cmath>

#include "core/error.h"

namespace cellm::model {
namespace {

int32_t get_i32(const gguf::File& f, const std::string& key) {
  const uint64_t v = f.get_uint(key);
  if (v > static_cast<uint64_t>(INT32_MAX))
    fail(ErrorCode::Format, "GGUF '", f.name(), "': metadata '", key, "' = ", v, " is too large");
  return static_cast<int32_t>(v);
}

int32_t get_i32_or(const gguf::File& f, const std::string& key, int32_t fallback) {
  return f.has(key) ? get_i32(f, key) : fallback;
}

void require_positive(const gguf::File& f, const std::string& key, int32_t v) {
  if (v <= 0) fail(ErrorCode::Format, "GGUF '", f.name(), "': metadata '", key, "' must be positive, got ", v);
}

// Gemma 3 files carry the global RoPE base only; local (sliding) layers use 10k, and one
// layer in six is global unless the file says otherwise.
constexpr float kGemma3LocalRopeBase = 10000.0f;
constexpr int32_t kGemma3WindowPattern = 6;
constexpr int32_t kGemma3_27BLayers = 62;

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> archs = {"llama", "gemma3", "qwen2", "qwen3"};
  return archs;
}

std::vector<int32_t> ModelConfig::windowed_layers() const {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i)
    if (layers[i].window > 0) out.push_back(i);
  return out;
}

std::vector<int32_t> ModelConfig::global_layers() const {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < static_cast<int32_t>(layers.size()); ++i)
    if (layers[i].window == 0) out.push_back(i);
  return out;
}

ModelConfig read_model_config(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  if (const std::string* name = f.find_string("general.name")) c.name = *name;
  bool known = false;
  for (const auto& a : supported_architectures()) known |= a == c.arch;
  if (!known) {
    std::string list;
    for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
    fail(ErrorCode::Unsupported, "architecture '", c.arch, "' is not supported (supported: ", list, ")");
  }
  const std::string p = c.arch + ".";
  c.n_layers = get_i32(f, p + "block_count");
  c.n_embd = get_i32(f, p + "embedding_length");
  c.n_ff = get_i32(f, p + "feed_forward_length");
  c.n_heads = get_i32(f, p + "attention.head_count");
  c.n_kv_heads = get_i32_or(f, p + "attention.head_count_kv", c.n_heads);
  c.context_length = get_i32(f, p + "context_length");
  require_positive(f, p + "block_count", c.n_layers);
  require_positive(f, p + "embedding_length", c.n_embd);
  require_positive(f, p + "feed_forward_length", c.n_ff);
  require_positive(f, p + "attention.head_count", c.n_heads);
  require_positive(f, p + "attention.head_count_kv", c.n_kv_heads);
  require_positive(f, p + "context_length", c.context_length);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(ErrorCode::Format, "GGUF '", f.name(), "': ", c.n_heads, " attention heads are not a multiple of ",
         c.n_kv_heads, " kv heads");
  if (c.n_layers > 4096) fail(ErrorCode::Format, "GGUF '", f.name(), "': ", c.n_layers, " layers is implausible");
  c.head_dim = get_i32_or(f, p + "attention.key_length", c.n_embd / c.n_heads);
  c.value_dim = get_i32_or(f, p + "attention.value_length", c.head_dim);
  require_positive(f, p + "attention.key_length", c.head_dim);
  if (c.value_dim != c.head_dim)
    fail(ErrorCode::Unsupported, "key length ", c.head_dim, " != value length ", c.value_dim, " is not supported");
  c.rope_dim = get_i32_or(f, p + "rope.dimension_count", c.head_dim);
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    fail(ErrorCode::Format, "GGUF '", f.name(), "': rope.dimension_count ", c.rope_dim, " does not fit head size ",
         c.head_dim);
  c.rms_eps = static_cast<float>(f.get_float_or(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (f.has(p + "vocab_size")) {
    c.vocab_size = get_i32(f, p + "vocab_size");
  } else if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int32_t>(f.get_array("tokenizer.ggml.tokens").size());
  }
  const float rope_base = static_cast<float>(f.get_float_or(p + "rope.freq_base").value_or(10000.0));
  float rope_scale = 1.0f;
  if (const std::string* type = f.find_string(p + "rope.scaling.type"); type && *type == "linear")
    rope_scale = static_cast<float>(f.get_float_or(p + "rope.scaling.factor").value_or(1.0));
  else if (type && *type != "none")
    fail(ErrorCode::Unsupported, "RoPE scaling '", *type, "' is not supported (none, linear)");
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.layers.assign(c.n_layers, LayerConfig{0, rope_base, rope_scale});

  if (c.arch == "llama") {
    c.rope_layout = RopeLayout::Interleaved;
  } else if (c.arch == "qwen2") {
    c.rope_layout = RopeLayout::Neox;
    c.qkv_bias = true;
  } else if (c.arch == "qwen3") {
    c.rope_layout = RopeLayout::Neox;
    c.qk_norm = true;
  } else if (c.arch == "gemma3") {
    c.rope_layout = RopeLayout::Neox;
    c.qk_norm = true;
    c.post_norms = true;
    c.scale_embeddings = true;
    c.scale_queries = true;
    c.gelu_ffn = true;
    c.sliding_window = get_i32(f, p + "attention.sliding_window");
    require_positive(f, p + "attention.sliding_window", c.sliding_window);
    const int32_t pattern = get_i32_or(f, p + "attention.sliding_window_pattern", kGemma3WindowPattern);
    require_positive(f, p + "attention.sliding_window_pattern", pattern);
    // Gemma 3 27B scales queries by 1/sqrt(query_pre_attn_scalar) = 1/sqrt(n_embd / n_heads)
    // (168, not its head size of 128); GGUF does not carry the scalar, so llama.cpp knows 27B by
    // its 62 layers, and so does cellm.
    if (c.n_layers == kGemma3_27BLayers) c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_heads));
    for (int32_t i = 0; i < c.n_layers; ++i) {
      if (i % pattern < pattern - 1) {  // every pattern-th layer is global
        c.layers[i].window = c.sliding_window;
        c.layers[i].rope_base = kGemma3LocalRopeBase;
        c.layers[i].rope_scale = 1.0f;
      }
    }
  }
  return c;
}

}  // namespace cellm::model
