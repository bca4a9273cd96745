#pragma once
// Finds the default models for tests. A missing model skips the test with the command that
// fetches it, unless CELLM_REQUIRE_MODELS is set (CI sets it), where it is a failure: a
// suite that silently skips its real-model checks proves nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace cellm::test {

inline constexpr const char* kSmolLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf";
inline constexpr const char* kGemma3 = "gemma-3-270m-q4_k_m.gguf";

inline std::string model_path(const std::string& file) {
  const char* dir = std::getenv("CELLM_MODELS_DIR");
  return (std::filesystem::path(dir ? dir : CELLM_SOURCE_DIR "/models") / file).string();
}

inline bool models_required() {
  const char* v = std::getenv("CELLM_REQUIRE_MODELS");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

}  // namespace cellm::test

// Use at the top of a test body: `CELLM_REQUIRE_MODEL(path, kSmolLM2);`
#define CELLM_REQUIRE_MODEL(var, file)                                                             \
  const std::string var = ::cellm::test::model_path(file);                                        \
  if (!std::filesystem::exists(var)) {                                                             \
    if (::cellm::test::models_required()) FAIL() << "model " << var << " is missing (CI requires it)"; \
    GTEST_SKIP() << "model " << var << " is missing; run scripts/fetch-models";                    \
  }
