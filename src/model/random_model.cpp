#include "model/random_model.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <tuple>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/quantize.h"
#include "gguf/writer.h"
#include "model/weight_mix.h"

namespace cellm::model {
namespace {

// GPT-2's byte-to-character map: printable bytes stand for themselves, the rest are shifted
// past 255, so every byte has a visible single-character token.
std::string byte_token(int b) {
  static const std::vector<int> code = [] {
    std::vector<int> c(256, -1);
    for (int i = 33; i <= 126; ++i) c[i] = i;
    for (int i = 161; i <= 172; ++i) c[i] = i;
    for (int i = 174; i <= 255; ++i) c[i] = i;
    int next = 256;
    for (int i = 0; i < 256; ++i)
      if (c[i] < 0) c[i] = next++;
    return c;
  }();
  const int cp = code[b];
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

constexpr int64_t kChunkRows = 64;  // rows per parallel task, each with a seed of its own

// A matrix of `rows` x `cols` weights drawn from N(offset, scale^2), quantized row by row.
// Rows are generated in chunks with seeds of their own, in parallel: an 8B model is billions
// of draws. The result depends on the seed only, not on the thread count.
gguf::Writer::Fill random_matrix(DType type, int64_t rows, int64_t cols, float scale, uint64_t seed, float offset = 0) {
  return [=](uint8_t* out, uint64_t) {
    const size_t rb = row_bytes(type, cols);
    const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
    ThreadPool pool(0);
    pool.parallel_for(chunks, [&](int64_t chunk, int) {
      std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(chunk));
      std::normal_distribution<float> normal(offset, scale);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = chunk * kChunkRows; r < std::min(rows, (chunk + 1) * kChunkRows); ++r) {
        for (float& v : row) v = normal(rng);
        gguf::quantize_row(type, row.data(), out + static_cast<size_t>(r) * rb, cols);
      }
    });
  };
}

// The fast path of random_matrix: 1024 "units" (one block; 32 elements of a float type) are
// quantized from N(0, scale^2), then every unit of every row is a random pick among them.
// Rows stay distinct and the values keep their distribution, at the cost of a copy per unit.
// Matrices of one type, width and scale share their pool (built when the first is written):
// the 30 attn_q of a model need one.
class UnitPools {
 public:
  explicit UnitPools(uint64_t seed) : seed_(seed) {}

  struct Pool {
    int64_t unit = 0;  // elements per unit
    size_t unit_bytes = 0;
    std::vector<uint8_t> bytes;
  };
  static constexpr int64_t kUnits = 1024;

  const Pool& get(DType type, int64_t cols, float scale) {
    Pool& pool = pools_[{static_cast<uint32_t>(type), cols, scale}];
    if (pool.bytes.empty()) build(pool, type, cols, scale);
    return pool;
  }

 private:
  void build(Pool& pool, DType type, int64_t cols, float scale) {
    constexpr int64_t kChunk = 64;
    const int64_t block = dtype_info(type).block_size;
    pool.unit = block > 1 ? block : (cols % 32 == 0 ? 32 : 1);
    pool.unit_bytes = row_bytes(type, pool.unit);
    pool.bytes.resize(static_cast<size_t>(kUnits) * pool.unit_bytes);
    const uint64_t seed = seed_ * 31 + static_cast<uint64_t>(type) * 65537 + static_cast<uint64_t>(cols);
    ThreadPool threads(0);
    threads.parallel_for(kUnits / kChunk, [&](int64_t chunk, int) {
      std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(chunk));
      std::normal_distribution<float> normal(0.0f, scale);
      std::vector<float> values(static_cast<size_t>(pool.unit));
      for (int64_t u = chunk * kChunk; u < (chunk + 1) * kChunk; ++u) {
        for (float& v : values) v = normal(rng);
        gguf::quantize_row(type, values.data(), pool.bytes.data() + static_cast<size_t>(u) * pool.unit_bytes, pool.unit);
      }
    });
  }

  uint64_t seed_;
  std::map<std::tuple<uint32_t, int64_t, float>, Pool> pools_;
};

gguf::Writer::Fill pooled_random_matrix(std::shared_ptr<UnitPools> pools, DType type, int64_t rows, int64_t cols,
                                        float scale, uint64_t seed) {
  return [=](uint8_t* out, uint64_t) {
    const UnitPools::Pool& pool = pools->get(type, cols, scale);
    const size_t rb = row_bytes(type, cols);
    ThreadPool threads(0);
    threads.parallel_for((rows + kChunkRows - 1) / kChunkRows, [&](int64_t chunk, int) {
      std::mt19937_64 rng(seed * 104729 + static_cast<uint64_t>(chunk));
      for (int64_t r = chunk * kChunkRows; r < std::min(rows, (chunk + 1) * kChunkRows); ++r) {
        uint8_t* row = out + static_cast<size_t>(r) * rb;
        for (int64_t u = 0; u < cols / pool.unit; ++u)
          std::memcpy(row + static_cast<size_t>(u) * pool.unit_bytes,
                      pool.bytes.data() + (rng() % UnitPools::kUnits) * pool.unit_bytes, pool.unit_bytes);
      }
    });
  };
}

void check_shape(const RandomModelSpec& s) {
  if (s.arch != "llama" && s.arch != "gemma3")
    fail(ErrorCode::InvalidArgument, "random models exist for llama and gemma3, not '", s.arch, "'");
  if (s.vocab < 260) fail(ErrorCode::InvalidArgument, "a random model needs a vocabulary of at least 260 tokens");
  const std::pair<const char*, int32_t> sizes[] = {{"n_layers", s.n_layers}, {"n_embd", s.n_embd},
                                                   {"n_ff", s.n_ff},         {"n_heads", s.n_heads},
                                                   {"n_kv_heads", s.n_kv_heads}, {"head_dim", s.head_dim},
                                                   {"context", s.context}};
  for (const auto& [name, value] : sizes)
    if (value <= 0) fail(ErrorCode::InvalidArgument, "random model ", name, " must be positive, not ", value);
  if (s.n_heads % s.n_kv_heads != 0)
    fail(ErrorCode::InvalidArgument, "random model n_heads (", s.n_heads, ") must be a multiple of n_kv_heads (",
         s.n_kv_heads, ")");
  if (s.head_dim % 2 != 0) fail(ErrorCode::InvalidArgument, "random model head_dim must be even (RoPE pairs)");
  const auto info = dtype_info(static_cast<uint32_t>(s.type));
  if (!info || !info->weight_format || !gguf::can_quantize(s.type)) {
    std::string names;
    for (DType t : random_model_types()) names += (names.empty() ? "" : ", ") + std::string(dtype_name(t));
    fail(ErrorCode::InvalidArgument, "cannot write ", info ? std::string(info->name) : "unknown", " weights (", names,
         ")");
  }
}

}  // namespace

std::vector<DType> random_model_types() {
  std::vector<DType> types;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto info = dtype_info(id);
    if (info && info->weight_format && gguf::can_quantize(info->type)) types.push_back(info->type);
  }
  return types;
}

DType matrix_type(DType type, int64_t cols) {
  if (cols % dtype_info(type).block_size == 0) return type;
  switch (type) {
    case DType::Q4_K: return cols % 32 == 0 ? DType::Q5_0 : DType::F16;
    case DType::Q5_K: return cols % 32 == 0 ? DType::Q5_1 : DType::F16;
    case DType::Q6_K: return cols % 32 == 0 ? DType::Q8_0 : DType::F16;
    default: return DType::F16;
  }
}

std::vector<std::string> random_model_presets() {
  return {"llama3-8b", "llama3-1b", "smollm2-135m", "gemma3-270m", "tiny-llama", "tiny-gemma3"};
}

RandomModelSpec random_model_preset(const std::string& name) {
  RandomModelSpec s;
  s.name = name;
  if (name == "llama3-8b") {
    s = {"llama", name, 32, 4096, 14336, 32, 8, 128, 128256, 8192, 500000.0f, 0, DType::Q4_K, false, 1};
  } else if (name == "llama3-1b") {
    s = {"llama", name, 16, 2048, 8192, 32, 8, 64, 128256, 8192, 500000.0f, 0, DType::Q4_K, true, 1};
  } else if (name == "smollm2-135m") {
    s = {"llama", name, 30, 576, 1536, 9, 3, 64, 49152, 8192, 100000.0f, 0, DType::Q4_1, true, 1};
  } else if (name == "gemma3-270m") {
    s = {"gemma3", name, 18, 640, 2048, 4, 1, 256, 262144, 32768, 1000000.0f, 512, DType::Q8_0, true, 1};
  } else if (name == "tiny-llama") {
    s = {"llama", name, 2, 64, 128, 4, 2, 16, 512, 2048, 10000.0f, 0, DType::Q8_0, true, 1};
  } else if (name == "tiny-gemma3") {
    s = {"gemma3", name, 6, 64, 128, 4, 1, 32, 512, 2048, 1000000.0f, 8, DType::Q8_0, true, 1};
  } else {
    std::string list;
    for (const auto& p : random_model_presets()) list += (list.empty() ? "" : ", ") + p;
    fail(ErrorCode::InvalidArgument, "unknown model preset '", name, "' (", list, ")");
  }
  return s;
}

RandomModelSummary write_random_model(const RandomModelSpec& s, const std::string& path,
                                      const std::function<void(uint64_t, uint64_t)>& progress) {
  check_shape(s);
  gguf::Writer w;
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", s.name);
  w.set_u32(a + "block_count", s.n_layers);
  w.set_u32(a + "context_length", s.context);
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "feed_forward_length", s.n_ff);
  w.set_u32(a + "attention.head_count", s.n_heads);
  w.set_u32(a + "attention.head_count_kv", s.n_kv_heads);
  w.set_u32(a + "attention.key_length", s.head_dim);
  w.set_u32(a + "attention.value_length", s.head_dim);
  w.set_u32(a + "rope.dimension_count", s.head_dim);
  w.set_f32(a + "rope.freq_base", s.rope_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.arch == "gemma3") w.set_u32(a + "attention.sliding_window", s.sliding_window);

  // Tokenizer: 256 byte tokens, ChatML specials, then unused fillers; no merges (bytes only).
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_token(b));
    types.push_back(1);
  }
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(special);
    types.push_back(3);
  }
  while (static_cast<int32_t>(tokens.size()) < s.vocab) {
    tokens.push_back("<unused" + std::to_string(tokens.size()) + ">");
    types.push_back(5);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "default");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", {});
  w.set_u32("tokenizer.ggml.bos_token_id", 256);
  w.set_u32("tokenizer.ggml.eos_token_id", 257);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template",
               "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");

  RandomModelSummary summary;
  uint64_t seed = s.seed * 1000003;
  auto pools = std::make_shared<UnitPools>(seed);
  // `tensor` of block `layer` (-1: outside the blocks), in the type tensor_type() gives it.
  auto add_matrix = [&](const std::string& tensor, int32_t layer, int64_t rows, int64_t cols, float scale) {
    const DType wanted = tensor_type(s, tensor, layer);
    const DType type = matrix_type(wanted, cols);
    summary.fallback_tensors += type != wanted;
    ++summary.tensors;
    const std::string name = (layer < 0 ? "" : "blk." + std::to_string(layer) + ".") + tensor + ".weight";
    w.add_tensor(name, {cols, rows}, type,
                 s.fast ? pooled_random_matrix(pools, type, rows, cols, scale, ++seed)
                        : random_matrix(type, rows, cols, scale, ++seed));
  };
  auto matrix = [&](const std::string& tensor, int32_t layer, int64_t rows, int64_t cols) {
    add_matrix(tensor, layer, rows, cols, 1.0f / std::sqrt(static_cast<float>(cols)));
  };
  auto norm = [&](const std::string& name, int64_t n) {
    ++summary.tensors;
    w.add_tensor(name, {n}, DType::F32, random_matrix(DType::F32, 1, n, 0.05f, ++seed, 1.0f));
  };
  const int64_t q_dim = int64_t{s.n_heads} * s.head_dim, kv_dim = int64_t{s.n_kv_heads} * s.head_dim;
  // Embeddings need a scale that keeps the first norm meaningful: unit variance per element.
  add_matrix("token_embd", -1, s.vocab, s.n_embd, 1.0f);
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", s.n_embd);
    matrix("attn_q", l, q_dim, s.n_embd);
    matrix("attn_k", l, kv_dim, s.n_embd);
    matrix("attn_v", l, kv_dim, s.n_embd);
    matrix("attn_output", l, s.n_embd, q_dim);
    norm(b + "ffn_norm.weight", s.n_embd);
    matrix("ffn_gate", l, s.n_ff, s.n_embd);
    matrix("ffn_up", l, s.n_ff, s.n_embd);
    matrix("ffn_down", l, s.n_embd, s.n_ff);
    if (s.arch == "gemma3") {
      norm(b + "attn_q_norm.weight", s.head_dim);
      norm(b + "attn_k_norm.weight", s.head_dim);
      norm(b + "post_attention_norm.weight", s.n_embd);
      norm(b + "post_ffw_norm.weight", s.n_embd);
    }
  }
  norm("output_norm.weight", s.n_embd);
  if (!s.tied_output) matrix("output", -1, s.vocab, s.n_embd);
  summary.file_bytes = w.file_size();
  w.write(path, progress);
  return summary;
}

}  // namespace cellm::model
