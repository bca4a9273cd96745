#pragma once
// The smallest models model::write_random_model makes that still load and build a program:
// one layer of 32 features and a 260-token byte-level vocabulary, about 15 KB as
// GGUF. They stand in for the real models where those are missing, and seed fuzz_gguf.
#include <cstdint>
#include <string>
#include <vector>

#include "model/random_model.h"

namespace cellm::fuzz {

// arch: "llama" or "gemma3".
model::RandomModelSpec micro_model_spec(const std::string& arch);

// The GGUF bytes of a random model (written through a temporary file and read back).
std::vector<uint8_t> random_model_bytes(const model::RandomModelSpec& spec);

}  // namespace cellm::fuzz
