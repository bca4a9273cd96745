#pragma once
// Which weight type each matrix of a random model gets: the one type asked for, or the mix of
// llama.cpp's Q4_K_M files (what most users run), so that benchmarks stream the bytes they do.
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "model/random_model.h"

namespace cellm::model {

// The --type name of WeightMix::Q4_K_M.
inline constexpr std::string_view kQ4KMName = "q4_k_m";

// kQ4KMName (any case) names WeightMix::Q4_K_M; nothing for any other name.
std::optional<WeightMix> weight_mix_from_name(std::string_view name);

// What the matrices are written in, as --type names it: "q4_k_m", or the type ("q4_K").
std::string_view weights_name(const RandomModelSpec& spec);

// The type of the matrix `tensor` ("token_embd", "output", or a block's "attn_q", "attn_k",
// "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down") of block `layer` (unused for
// token_embd and output) in a model of `spec`, before matrix_type()'s fallback for rows that are
// not whole blocks.
DType tensor_type(const RandomModelSpec& spec, std::string_view tensor, int32_t layer = 0);

}  // namespace cellm::model
