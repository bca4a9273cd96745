#pragma once
// Where a command finds its model when -m is omitted: the default model (SmolLM2-135M-Instruct
// Q4_1) as scripts/fetch-models installs it.
#include <string>

namespace cellm::cli {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// Returns `flag` when given; otherwise the default model, looked for in $CELLM_MODELS_DIR, the
// models/ folder of the source tree this binary was built from, and ./models. Throws NotFound
// with the places tried and the command that fetches it.
std::string resolve_model_path(const std::string& flag);

}  // namespace cellm::cli
