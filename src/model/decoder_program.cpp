#include "model/decoder_program.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "model/program_builder.h"

namespace cellm::model {

bool stack_projections() {
  const char* v = std::getenv("CELLM_STACK_PROJECTIONS");
  return v == nullptr || std::string(v) != "0";
}

Program build_decoder_program(const gguf::File& file, const ModelConfig& c, Method method, int32_t max_tokens) {
  ProgramBuilder b(file, c, method, max_tokens);
  Program& p = b.program();
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const auto glu_act = c.gelu_ffn ? backend::GluActivation::GeluTanh : backend::GluActivation::Silu;
  const bool stack = stack_projections();

  const ValueId token_embd = b.weight("token_embd.weight", c.vocab_size, c.n_embd);
  // Gemma scales embeddings by sqrt(n_embd), rounded to float as the reference does.
  const float embd_scale = c.scale_embeddings ? std::sqrt(static_cast<float>(c.n_embd)) : 1.0f;
  ValueId x = b.embed(p.tokens, token_embd, embd_scale);

  // x += the projection of `in` by `w`, through the post-norm `post_norm` where the model has
  // them; without one the matmul and the add are one op.
  auto add_projection = [&](ValueId in, ValueId w, const std::string& post_norm) {
    if (!c.post_norms) {
      x = b.matmul_add(in, w, x);
      return;
    }
    const ValueId product = b.matmul(in, w);
    x = b.add(x, b.rms_norm(product, b.vector_weight(post_norm, c.n_embd), c.rms_eps));
  };

  for (int32_t l = 0; l < c.n_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const LayerConfig& layer = c.layers[l];
    ValueId h = b.rms_norm(x, b.vector_weight(blk + "attn_norm.weight", c.n_embd), c.rms_eps);
    ValueId q, k, v;
    if (c.qkv_bias) {
      q = b.matmul(h, b.weight(blk + "attn_q.weight", q_dim, c.n_embd), b.vector_weight(blk + "attn_q.bias", q_dim));
      k = b.matmul(h, b.weight(blk + "attn_k.weight", kv_dim, c.n_embd), b.vector_weight(blk + "attn_k.bias", kv_dim));
      v = b.matmul(h, b.weight(blk + "attn_v.weight", kv_dim, c.n_embd), b.vector_weight(blk + "attn_v.bias", kv_dim));
    } else {
      const auto qkv = b.projections(
          h, {{blk + "attn_q.weight", q_dim}, {blk + "attn_k.weight", kv_dim}, {blk + "attn_v.weight", kv_dim}}, stack);
      q = qkv[0], k = qkv[1], v = qkv[2];
    }
    if (c.qk_norm) {
      q = b.rms_norm(q, b.vector_weight(blk + "attn_q_norm.weight", c.head_dim), c.rms_eps, c.head_dim);
      k = b.rms_norm(k, b.vector_weight(blk + "attn_k_norm.weight", c.head_dim), c.rms_eps, c.head_dim);
    }
    backend::RopeParams rope{c.n_heads, c.head_dim, c.rope_dim, layer.rope_base, 1.0f / layer.rope_scale,
                             c.rope_layout};
    if (const ValueId qk = b.joined_view(q, k); qk != kNoValue) {
      // Q and K side by side in one output: one rotation over all their heads.
      rope.n_heads = c.n_heads + c.n_kv_heads;
      b.rope(qk, p.positions, rope);
    } else {
      b.rope(q, p.positions, rope);
      rope.n_heads = c.n_kv_heads;
      b.rope(k, p.positions, rope);
    }
    b.kv_store(l, k, v);
    ValueId attn = b.attention(l, q, c.attention_scale, c.scale_queries);
    add_projection(attn, b.weight(blk + "attn_output.weight", c.n_embd, q_dim), blk + "post_attention_norm.weight");
    // Past the last attention only the rows whose logits are wanted matter: the last FFN, the
    // final norm and the output matrix run on those alone (as llama.cpp's graphs do). A decode
    // step wants every row's (the executor asks for all of them and picks the requested ones, as
    // it does for a bucket's padding rows), so there the gather would only copy: one kernel of a
    // CUDA decode step, 9.0 us of llama3-8b's on the critical path (H100, kernel trace).
    if (l == c.n_layers - 1 && method != Method::Decode) x = b.gather_rows(x, p.logit_rows);

    h = b.rms_norm(x, b.vector_weight(blk + "ffn_norm.weight", c.n_embd), c.rms_eps);
    const auto gate_up = b.projections(h, {{blk + "ffn_gate.weight", c.n_ff}, {blk + "ffn_up.weight", c.n_ff}}, stack);
    const ValueId act = b.glu(gate_up[0], gate_up[1], glu_act);
    add_projection(act, b.weight(blk + "ffn_down.weight", c.n_embd, c.n_ff), blk + "post_ffw_norm.weight");
  }

  const ValueId selected = b.rms_norm(x, b.vector_weight("output_norm.weight", c.n_embd), c.rms_eps);
  const ValueId output = b.has_tensor("output.weight") ? b.weight("output.weight", c.vocab_size, c.n_embd) : token_embd;
  return b.finish(b.matmul(selected, output));
}

}  // namespace cellm::model
