#pragma once
// The decoder-only transformer shared by every supported architecture (llama, gemma3, qwen2,
// qwen3): their differences are the traits of ModelConfig (q/k norms, post-norms, embedding
// scale, GeGLU vs SwiGLU, q/k/v biases, windows and RoPE per layer), not separate code.
#include "gguf/file.h"
#include "model/config.h"
#include "model/program.h"

namespace cellm::model {

// max_tokens: the decode bucket size, or max_write for prefill.
// Whether projections of one input (q/k/v, gate/up) run as one matmul over stacked weights:
// yes unless the environment sets CELLM_STACK_PROJECTIONS=0 (to measure what it buys).
bool stack_projections();

Program build_decoder_program(const gguf::File& file, const ModelConfig& config, Method method, int32_t max_tokens);

}  // namespace cellm::model
