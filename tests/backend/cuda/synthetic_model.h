#pragma once
// Small random-weight models written as GGUF in memory, so end-to-end GPU tests need no model
// files: a llama (SwiGLU, interleaved RoPE, separate output matrix) and a gemma3 (GeGLU, q/k
// norms, post norms, sliding-window layers, tied output), their weights spread over every
// weight format. Token embeddings have unit variance and the output is the embedding table
// (or alike), so logits are spread out and greedy choices have clear margins.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gguf/quantize.h"
#include "gguf/writer.h"

namespace cellm::cuda::testing {

struct SyntheticModel {
  std::string arch = "llama";
  int32_t layers = 2;
  int32_t n_embd = 256;
  int32_t n_ff = 512;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 64;
  int32_t vocab = 384;
  int32_t window = 0;  // gemma3: sliding window of the local layers (every other layer)
  std::vector<DType> matrix_types;  // cycled over the layers' matrices
};

inline SyntheticModel synthetic_llama() {
  SyntheticModel m;
  m.matrix_types = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                    DType::F16,  DType::BF16, DType::F32,  DType::Q8_0};
  return m;
}

inline SyntheticModel synthetic_gemma3() {
  SyntheticModel m;
  m.arch = "gemma3";
  m.layers = 4;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.head_dim = 128;
  m.window = 8;
  m.matrix_types = {DType::Q5_0, DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q5_K, DType::Q4_K, DType::Q6_K};
  return m;
}

inline std::vector<uint8_t> write_synthetic_model(const SyntheticModel& m, uint32_t seed) {
  gguf::Writer w;
  const std::string p = m.arch + ".";
  w.set_string("general.architecture", m.arch);
  w.set_string("general.name", "synthetic " + m.arch);
  w.set_u32(p + "block_count", static_cast<uint32_t>(m.layers));
  w.set_u32(p + "embedding_length", static_cast<uint32_t>(m.n_embd));
  w.set_u32(p + "feed_forward_length", static_cast<uint32_t>(m.n_ff));
  w.set_u32(p + "attention.head_count", static_cast<uint32_t>(m.n_heads));
  w.set_u32(p + "attention.head_count_kv", static_cast<uint32_t>(m.n_kv_heads));
  w.set_u32(p + "attention.key_length", static_cast<uint32_t>(m.head_dim));
  w.set_u32(p + "attention.value_length", static_cast<uint32_t>(m.head_dim));
  w.set_u32(p + "context_length", 4096);
  w.set_u32(p + "vocab_size", static_cast<uint32_t>(m.vocab));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_f32(p + "rope.freq_base", 10000.0f);
  if (m.arch == "gemma3") {
    w.set_u32(p + "attention.sliding_window", static_cast<uint32_t>(m.window));
    w.set_u32(p + "attention.sliding_window_pattern", 2);
  }

  std::mt19937 rng(seed);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, DType type, float stddev) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> row(static_cast<size_t>(cols));
    const size_t stride = row_bytes(type, cols);
    std::vector<uint8_t> bytes(stride * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = dist(rng);
      uint8_t* dst = bytes.data() + static_cast<size_t>(r) * stride;
      if (type == DType::F32)
        std::memcpy(dst, row.data(), stride);
      else
        gguf::quantize_row(type, row.data(), dst, cols);
    }
    w.add_tensor(name, {cols, rows}, type, std::move(bytes));
  };
  auto norm = [&](const std::string& name, int64_t n) {
    std::uniform_real_distribution<float> dist(0.8f, 1.2f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add_tensor(name, {n}, DType::F32, std::move(bytes));
  };

  const int64_t q_dim = int64_t{m.n_heads} * m.head_dim, kv_dim = int64_t{m.n_kv_heads} * m.head_dim;
  matrix("token_embd.weight", m.vocab, m.n_embd, DType::Q8_0, 1.0f);
  size_t next = 0;
  auto type = [&] { return m.matrix_types[next++ % m.matrix_types.size()]; };
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(m.n_embd));
  for (int32_t l = 0; l < m.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", m.n_embd);
    matrix(b + "attn_q.weight", q_dim, m.n_embd, type(), in_scale);
    matrix(b + "attn_k.weight", kv_dim, m.n_embd, type(), in_scale);
    matrix(b + "attn_v.weight", kv_dim, m.n_embd, type(), in_scale);
    matrix(b + "attn_output.weight", m.n_embd, q_dim, type(), 1.0f / std::sqrt(static_cast<float>(q_dim)));
    norm(b + "ffn_norm.weight", m.n_embd);
    matrix(b + "ffn_gate.weight", m.n_ff, m.n_embd, type(), in_scale);
    matrix(b + "ffn_up.weight", m.n_ff, m.n_embd, type(), in_scale);
    matrix(b + "ffn_down.weight", m.n_embd, m.n_ff, type(), 1.0f / std::sqrt(static_cast<float>(m.n_ff)));
    if (m.arch == "gemma3") {
      norm(b + "attn_q_norm.weight", m.head_dim);
      norm(b + "attn_k_norm.weight", m.head_dim);
      norm(b + "post_attention_norm.weight", m.n_embd);
      norm(b + "post_ffw_norm.weight", m.n_embd);
    }
  }
  norm("output_norm.weight", m.n_embd);
  if (m.arch == "llama") matrix("output.weight", m.vocab, m.n_embd, DType::Q6_K, 1.0f);
  return w.to_bytes();
}

}  // namespace cellm::cuda::testing
