#include "backend/cpu/ggml/ggml_build.h"

#include "backend/cpu/cpu_features.h"
#include "core/error.h"

namespace cellm::cpu::ggml {

const char* build_name(Build build) { return build == Build::Avx512 ? "avx512" : "avx2"; }

Build native_build() { return cpu_features().avx512f ? Build::Avx512 : Build::Avx2; }

Build parse_build(const std::string& numerics) {
  if (numerics == "ggml") return native_build();
  if (numerics == "ggml-avx2") return Build::Avx2;
  if (numerics == "ggml-avx512") return Build::Avx512;
  fail(ErrorCode::InvalidArgument, "unknown numerics '", numerics, "' (choose cellm, ggml, ggml-avx2 or ggml-avx512)");
}

}  // namespace cellm::cpu::ggml
