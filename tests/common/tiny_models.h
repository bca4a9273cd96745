#pragma once
// Tiny random-weight models (model/random_model.h) for tests that need a whole forward pass
// without the real models: written once per test process into the test temp dir.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "model/random_model.h"

namespace cellm::test {

inline std::string tiny_model(const std::string& preset, DType type = DType::Q8_0) {
  // Removes this process's files at exit.
  struct Files : std::map<std::string, std::string> {
    ~Files() {
      for (const auto& [key, path] : *this) std::remove(path.c_str());
    }
  };
  static std::mutex mutex;
  static Files written;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string key = preset + "-" + std::string(dtype_name(type));
  auto it = written.find(key);
  if (it != written.end()) return it->second;
  model::RandomModelSpec spec = model::random_model_preset(preset);
  spec.type = type;
  // Per process: CTest runs test programs in parallel, and they must not write the same file.
  const std::string path = ::testing::TempDir() + "cellm-" + std::to_string(::getpid()) + "-" + key + ".gguf";
  model::write_random_model(spec, path);
  return written[key] = path;
}

}  // namespace cellm::test
