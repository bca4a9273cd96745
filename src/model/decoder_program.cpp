#include "model/decoder_program.h"

#include <cmath>

#include "model/program_builder.h"

namespace cellm::model {

Program build_decoder_program(const gguf::File& file, const ModelConfig& c, Method method, int32_t max_tokens) {
  ProgramBuilder b(file, c, method, max_tokens);
  Program& p = b.program();
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const auto glu_act = c.gelu_ffn ? backend::GluActivation::GeluTanh : backend::GluActivation::Silu;

  const ValueId token_embd = b.weight("token_embd.weight", c.vocab_size, c.n_embd);
  // Gemma scales embeddings by sqrt(n_embd), rounded to float as the reference does.
  const float embd_scale = c.scale_embeddings ? std::sqrt(static_cast<float>(c.n_embd)) : 1.0f;
  ValueId x = b.embed(p.tokens, token_embd, embd_scale);

  for (int32_t l = 0; l < c.n_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const LayerConfig& layer = c.layers[l];
    auto bias = [&](const char* name, int64_t n) {
      return c.qkv_bias ? b.vector_weight(blk + name, n) : kNoValue;
    };
    ValueId h = b.rms_norm(x, b.vector_weight(blk + "attn_norm.weight", c.n_embd), c.rms_eps);
    ValueId q = b.matmul(h, b.weight(blk + "attn_q.weight", q_dim, c.n_embd), bias("attn_q.bias", q_dim));
    ValueId k = b.matmul(h, b.weight(blk + "attn_k.weight", kv_dim, c.n_embd), bias("attn_k.bias", kv_dim));
    ValueId v = b.matmul(h, b.weight(blk + "attn_v.weight", kv_dim, c.n_embd), bias("attn_v.bias", kv_dim));
    if (c.qk_norm) {
      q = b.rms_norm(q, b.vector_weight(blk + "attn_q_norm.weight", c.head_dim), c.rms_eps, c.head_dim);
      k = b.rms_norm(k, b.vector_weight(blk + "attn_k_norm.weight", c.head_dim), c.rms_eps, c.head_dim);
    }
    backend::RopeParams rope{c.n_heads, c.head_dim, c.rope_dim, layer.rope_base, 1.0f / layer.rope_scale,
                             c.rope_layout};
    b.rope(q, p.positions, rope);
    rope.n_heads = c.n_kv_heads;
    b.rope(k, p.positions, rope);
    b.kv_store(l, k, v);
    ValueId attn = b.attention(l, q, c.attention_scale);
    ValueId o = b.matmul(attn, b.weight(blk + "attn_output.weight", c.n_embd, q_dim));
    if (c.post_norms) o = b.rms_norm(o, b.vector_weight(blk + "post_attention_norm.weight", c.n_embd), c.rms_eps);
    x = b.add(x, o);

    h = b.rms_norm(x, b.vector_weight(blk + "ffn_norm.weight", c.n_embd), c.rms_eps);
    ValueId gate = b.matmul(h, b.weight(blk + "ffn_gate.weight", c.n_ff, c.n_embd));
    ValueId up = b.matmul(h, b.weight(blk + "ffn_up.weight", c.n_ff, c.n_embd));
    ValueId down = b.matmul(b.glu(gate, up, glu_act), b.weight(blk + "ffn_down.weight", c.n_embd, c.n_ff));
    if (c.post_norms) down = b.rms_norm(down, b.vector_weight(blk + "post_ffw_norm.weight", c.n_embd), c.rms_eps);
    x = b.add(x, down);
  }

  // Only the rows whose logits are wanted go through the final norm and the output matrix.
  ValueId selected = b.gather_rows(x, p.logit_rows);
  selected = b.rms_norm(selected, b.vector_weight("output_norm.weight", c.n_embd), c.rms_eps);
  const ValueId output = b.has_tensor("output.weight") ? b.weight("output.weight", c.vocab_size, c.n_embd) : token_embd;
  return b.finish(b.matmul(selected, output));
}

}  // namespace cellm::model
