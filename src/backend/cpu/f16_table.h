#pragma once
// fp16 -> f32 through a 256 KiB table: exact, branch-free and fast on any x86-64 or ARM core,
// for the portable kernel paths (the AVX2 paths convert with F16C instructions instead).
#include <cstdint>

namespace cellm::cpu {

extern const float* const kF16ToF32;

inline float f16_to_f32(uint16_t h) { return kF16ToF32[h]; }

}  // namespace cellm::cpu
