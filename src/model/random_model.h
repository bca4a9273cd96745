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

// How the matrices' types are chosen (model/weight_mix.h says which type each one gets).
enum class WeightMix {
  Uniform,  // every matrix in RandomModelSpec::type, as llama.cpp's --pure files
  Q4_K_M,   // llama.cpp's Q4_K_M: q4_K, with the output and about half the layers' attn_v and
            // ffn_down in q6_K
};

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
  DType type = DType::Q8_0;    // matrices under WeightMix::Uniform; norms are F32
  bool tied_output = true;     // no output.weight: logits use token_embd
  uint64_t seed = 1;
  WeightMix mix = WeightMix::Uniform;  // Q4_K_M sets every matrix's type; `type` is then unused
  // Matrices as random picks from a small pool of quantized blocks (1024 per tensor) instead
  // of quantizing every random float: the same formats and value distribution, valid for any
  // type, and ~100x faster for the k-quants, whose least-squares encoder costs ~200 ns per
  // weight (minutes for an 8B model).
  bool fast = false;
};

struct RandomModelSummary {
  uint64_t file_bytes = 0;
  int64_t tensors = 0;
  // Matrices whose rows are not a whole number of their type's blocks (a 64-wide tiny model at
  // a 256-element k-quant), written in matrix_type(type, cols) instead.
  int64_t fallback_tensors = 0;
};

// Named shapes: llama3-8b, llama3-1b, smollm2-135m, gemma3-270m, tiny-llama, tiny-gemma3.
RandomModelSpec random_model_preset(const std::string& name);
std::vector<std::string> random_model_presets();

// The weight types a random model can be written in (F32, F16, BF16, Q4_0 ... Q6_K).
std::vector<DType> random_model_types();

// The type a matrix with rows of `cols` weights gets when `type` is asked for: `type` itself
// when the rows hold whole blocks, else what llama.cpp falls back to (Q4_K -> Q5_0, Q5_K ->
// Q5_1, Q6_K -> Q8_0; F16 for the 32-element formats).
DType matrix_type(DType type, int64_t cols);

// Weights are N(0, 1/fan_in) quantized per row (realistic enough to keep activations finite).
// `progress(done, total)` is called as tensors are written (bytes). Throws InvalidArgument for a
// type that is not a weight format cellm can write, or a shape that does not fit together.
RandomModelSummary write_random_model(const RandomModelSpec& spec, const std::string& path,
                                      const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace cellm::model
