#pragma once
// Writes a valid GGUF model of a real architecture and shape with random weights and a small
// synthetic byte-level tokenizer: for tests (tiny models built in milliseconds) and for
// `cellm mkmodel`, which benchmarks shapes larger than the default models.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cellm::model {

struct RandomModelSpec {
  std::string arch = "llama";  // llama or gemma3
  std::string name = "random";
  int32_t n_layers = 2;
  int32_t n_embd = 64;
  int32_t n_ff = 128;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 16;
  int32_t vocab = 512;  // at least 256 byte tokens + 2 specials
  int32_t context = 2048;
  float rope_base = 10000.0f;
  int32_t sliding_window = 0;  // gemma3: window of the local layers
  DType type = DType::Q8_0;    // matrices; norms are F32
  bool tied_output = true;     // no output.weight: logits use token_embd
  uint64_t seed = 1;
};

// Named shapes: llama3-8b, llama3-1b, smollm2-135m, gemma3-270m, tiny-llama, tiny-gemma3.
RandomModelSpec random_model_preset(const std::string& name);
std::vector<std::string> random_model_presets();

// Weights are N(0, 1/fan_in) quantized per row (realistic enough to keep activations finite).
// `progress(done, total)` is called as tensors are written (bytes).
void write_random_model(const RandomModelSpec& spec, const std::string& path,
                        const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace cellm::model
