#pragma once
// Creates a backend by name: "cpu", "cuda", or "auto" (CUDA when a usable GPU is present,
// else the CPU). Asking for "cuda" where there is none is an error that says why.
// `numerics` other than "cellm" asks for llama.cpp's arithmetic (cpu/ggml/ggml_build.h):
// "ggml" (the build llama.cpp would be on this CPU), "ggml-avx2" or "ggml-avx512"; only the
// CPU computes it, so "auto" then means the CPU and "cuda" is an error.
#include <memory>
#include <string>

#include "backend/backend.h"

namespace cellm::backend {

struct BackendOptions {
  std::string name = "auto";
  int threads = 0;  // CPU threads; 0 = every hardware thread
  int device = 0;   // CUDA device index
  std::string numerics = "cellm";
};

std::unique_ptr<Backend> create_backend(const BackendOptions& options);
bool cuda_compiled_in();

}  // namespace cellm::backend
