#include "model/weight_mix.h"

#include <algorithm>
#include <cctype>

namespace cellm::model {
namespace {

// llama.cpp's quantizer (llama_tensor_get_type in src/llama-quant.cpp) spends more bits on the
// first and last eighth of the layers and on every third layer between them.
bool use_more_bits(int32_t layer, int32_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The Q4_K_M rule of llama.cpp's quantizer for the matrices a random model has (no MoE, no
// Falcon): q4_K by default; q6_K for the matrix that makes the logits (output.weight, or
// token_embd.weight where the output is tied to it) and for attn_v and ffn_down in the layers
// of use_more_bits. A llama of 80 layers with grouped-query attention is what llama.cpp calls
// 70B: its attn_v are small beside attn_q, so its other layers' attn_v get q5_K. Untied
// token embeddings stay q4_K. (gemma-3-270m-q4_k_m.gguf, a default model, has exactly these
// types after the fallback.)
DType q4_k_m_type(const RandomModelSpec& s, std::string_view tensor, int32_t layer) {
  if (tensor == "output" || (tensor == "token_embd" && s.tied_output)) return DType::Q6_K;
  const bool more_bits = use_more_bits(layer, s.n_layers);
  if (tensor == "ffn_down" && more_bits) return DType::Q6_K;
  if (tensor == "attn_v") {
    if (more_bits) return DType::Q6_K;
    const bool llama_70b = s.arch == "llama" && s.n_layers == 80 && s.n_heads != s.n_kv_heads;
    if (llama_70b) return DType::Q5_K;
  }
  return DType::Q4_K;
}

}  // namespace

std::optional<WeightMix> weight_mix_from_name(std::string_view name) {
  const auto same = [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; };
  if (std::equal(name.begin(), name.end(), kQ4KMName.begin(), kQ4KMName.end(), same)) return WeightMix::Q4_K_M;
  return std::nullopt;
}

std::string_view weights_name(const RandomModelSpec& spec) {
  return spec.mix == WeightMix::Q4_K_M ? kQ4KMName : dtype_name(spec.type);
}

DType tensor_type(const RandomModelSpec& spec, std::string_view tensor, int32_t layer) {
  if (spec.mix == WeightMix::Q4_K_M) return q4_k_m_type(spec, tensor, layer);
  // A Q4_1 model keeps its embeddings in Q8_0, as the SmolLM2 Q4_1 file does.
  if (tensor == "token_embd" && spec.type == DType::Q4_1) return DType::Q8_0;
  return spec.type;
}

}  // namespace cellm::model
