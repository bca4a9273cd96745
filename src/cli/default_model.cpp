#include "cli/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

#ifndef CELLM_SOURCE_DIR
#define CELLM_SOURCE_DIR "."
#endif

namespace cellm::cli {

std::string resolve_model_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("CELLM_MODELS_DIR")) dirs.emplace_back(env);
  dirs.emplace_back(std::filesystem::path(CELLM_SOURCE_DIR) / "models");
  dirs.emplace_back("models");
  std::string tried;
  for (const auto& dir : dirs) {
    const auto candidate = dir / kDefaultModelFile;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate.string();
    tried += "\n  " + candidate.string();
  }
  fail(ErrorCode::NotFound, "no -m given and the default model was not found; tried:", tried,
       "\nrun scripts/fetch-models to download it, or pass -m MODEL.gguf");
}

}  // namespace cellm::cli
