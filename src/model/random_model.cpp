#include "model/random_model.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/quantize.h"
#include "gguf/writer.h"

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

// A matrix of `rows` x `cols` weights drawn from N(offset, scale^2), quantized row by row.
// Rows are generated in chunks with seeds of their own, in parallel: an 8B model is billions
// of draws. The result depends on the seed only, not on the thread count.
gguf::Writer::Fill random_matrix(DType type, int64_t rows, int64_t cols, float scale, uint64_t seed, float offset = 0) {
  return [=](uint8_t* out, uint64_t) {
    constexpr int64_t kChunkRows = 64;
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

}  // namespace

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

void write_random_model(const RandomModelSpec& s, const std::string& path,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  if (s.arch != "llama" && s.arch != "gemma3")
    fail(ErrorCode::InvalidArgument, "random models exist for llama and gemma3, not '", s.arch, "'");
  if (s.vocab < 260) fail(ErrorCode::InvalidArgument, "a random model needs a vocabulary of at least 260 tokens");
  if (!gguf::can_quantize(s.type)) fail(ErrorCode::InvalidArgument, "cannot write ", dtype_name(s.type), " weights");
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

  uint64_t seed = s.seed * 1000003;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, DType type) {
    w.add_tensor(name, {cols, rows}, type, random_matrix(type, rows, cols, 1.0f / std::sqrt(static_cast<float>(cols)), ++seed));
  };
  auto norm = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, {n}, DType::F32, random_matrix(DType::F32, 1, n, 0.05f, ++seed, 1.0f));
  };
  const int64_t q_dim = int64_t{s.n_heads} * s.head_dim, kv_dim = int64_t{s.n_kv_heads} * s.head_dim;
  // Embeddings need a scale that keeps the first norm meaningful: unit variance per element.
  w.add_tensor("token_embd.weight", {s.n_embd, s.vocab}, s.type == DType::Q4_1 ? DType::Q8_0 : s.type,
               random_matrix(s.type == DType::Q4_1 ? DType::Q8_0 : s.type, s.vocab, s.n_embd, 1.0f, ++seed));
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", s.n_embd);
    matrix(b + "attn_q.weight", q_dim, s.n_embd, s.type);
    matrix(b + "attn_k.weight", kv_dim, s.n_embd, s.type);
    matrix(b + "attn_v.weight", kv_dim, s.n_embd, s.type);
    matrix(b + "attn_output.weight", s.n_embd, q_dim, s.type);
    norm(b + "ffn_norm.weight", s.n_embd);
    matrix(b + "ffn_gate.weight", s.n_ff, s.n_embd, s.type);
    matrix(b + "ffn_up.weight", s.n_ff, s.n_embd, s.type);
    matrix(b + "ffn_down.weight", s.n_embd, s.n_ff, s.type);
    if (s.arch == "gemma3") {
      norm(b + "attn_q_norm.weight", s.head_dim);
      norm(b + "attn_k_norm.weight", s.head_dim);
      norm(b + "post_attention_norm.weight", s.n_embd);
      norm(b + "post_ffw_norm.weight", s.n_embd);
    }
  }
  norm("output_norm.weight", s.n_embd);
  if (!s.tied_output) matrix("output.weight", s.vocab, s.n_embd, s.type);
  w.write(path, progress);
}

}  // namespace cellm::model
