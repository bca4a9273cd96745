#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace cellm::cpu {
namespace {

MatmulIsa best_available() {
  if (matmul_isa_available(MatmulIsa::Avx512)) return MatmulIsa::Avx512;
  if (matmul_isa_available(MatmulIsa::Avx2)) return MatmulIsa::Avx2;
  return MatmulIsa::Portable;
}

MatmulIsa choose() {
  const char* forced = std::getenv("CELLM_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return best_available();
  for (MatmulIsa isa : {MatmulIsa::Portable, MatmulIsa::Avx2, MatmulIsa::Avx512}) {
    if (matmul_isa_name(isa) != forced) continue;
    if (!matmul_isa_available(isa))
      fail(ErrorCode::Unsupported, "CELLM_CPU_ISA=", forced, ": this CPU lacks it (has: ", cpu_features_summary(), ")");
    return isa;
  }
  fail(ErrorCode::InvalidArgument, "CELLM_CPU_ISA=", forced, ": expected portable, avx2 or avx512");
}

}  // namespace

std::string_view matmul_isa_name(MatmulIsa isa) {
  switch (isa) {
    case MatmulIsa::Portable: return "portable";
    case MatmulIsa::Avx2: return "avx2";
    case MatmulIsa::Avx512: return "avx512";
  }
  return "unknown";
}

bool matmul_isa_available(MatmulIsa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case MatmulIsa::Portable: return true;
    case MatmulIsa::Avx2: return avx2;
    case MatmulIsa::Avx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  }
  return false;
}

MatmulIsa default_matmul_isa() {
  static const MatmulIsa isa = choose();
  return isa;
}

}  // namespace cellm::cpu
