#pragma once
// What the processor we run on can do, probed once at run time, so one binary picks the
// AVX-512/VNNI, AVX2 or portable kernels on any x86-64 machine (and the portable ones elsewhere).
#include <string>

namespace cellm::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx_vnni = false;
};

const CpuFeatures& cpu_features();
std::string cpu_features_summary();

}  // namespace cellm::cpu
