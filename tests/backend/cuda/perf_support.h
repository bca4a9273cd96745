#pragma once
// What the GPU throughput tests share: the opt-in switch and random weight bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace cellm::cuda::testing {

// Throughput tests print figures and assert nothing about time; they run only when asked.
inline bool perf_enabled() {
  const char* v = std::getenv("CELLM_CUDA_PERF");
  return v != nullptr && std::string(v) == "1";
}

// Random bytes for weight matrices; the kernels do the same work whatever the values. With
// `finite_scales`, the top bits of every 16-bit word are cleared so fp16 scales stay finite.
inline std::vector<uint8_t> random_weight_bytes(size_t n, uint64_t seed, bool finite_scales = true) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  if (finite_scales)
    for (size_t i = 1; i < n; i += 2) v[i] &= 0x3f;
  return v;
}

}  // namespace cellm::cuda::testing
