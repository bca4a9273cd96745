#include "support/micro_model.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace cellm::fuzz {

model::RandomModelSpec micro_model_spec(const std::string& arch) {
  model::RandomModelSpec s;
  s.arch = arch;
  s.name = "micro-" + arch;
  s.n_layers = 1;
  s.n_embd = 32;
  s.n_ff = 32;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 16;
  s.vocab = 260;
  s.context = 64;
  s.sliding_window = 4;
  s.type = DType::Q4_0;
  return s;
}

std::vector<uint8_t> random_model_bytes(const model::RandomModelSpec& spec) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("cellm-fuzz-" + std::to_string(::getpid()) + "-" + spec.name + ".gguf");
  model::write_random_model(spec, path.string());
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  if (bytes.empty()) fail(ErrorCode::Io, "could not read back ", path.string());
  return bytes;
}

}  // namespace cellm::fuzz
