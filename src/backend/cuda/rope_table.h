#pragma once
// Cos/sin tables of the rotary embedding, computed on the host by the CPU kernel's own loop
// and libm (backend/cpu/rope_kernel.cpp), so the GPU rotates with the CPU's bits. CUDA's
// cosf/sinf differ from the host libm in the last bit often enough that queries and keys
// would differ, and through the activation quantization the tokens would drift. One table per
// distinct (base, freq_scale, rope_dim), for positions below kRopeTablePositions; positions
// beyond it are computed on the device (close, not bit-exact).
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "backend/ops.h"

namespace cellm::cuda {

inline constexpr int kRopeTablePositions = 8192;

namespace rope {
// What the angle of pair i (0 <= i < half) at a position depends on (rope_rules.cuh).
struct Angles {
  const float2* table;  // [kRopeTablePositions][half] (cos, sin), or null
  int half;             // rope_dim / 2
  float freq_scale;
  float theta_scale;
};
}  // namespace rope

class RopeTables {
 public:
  explicit RopeTables(DeviceMemory& memory) : memory_(memory) {}
  ~RopeTables();
  RopeTables(const RopeTables&) = delete;
  RopeTables& operator=(const RopeTables&) = delete;

  // The device table of these parameters: [kRopeTablePositions][rope_dim / 2] pairs (cos,
  // sin). Built on first use; null while `stream` is being captured into a graph (no
  // synchronous copy may run then): the kernel then computes the angles itself.
  const float2* find(const backend::RopeParams& p, cudaStream_t stream);

 private:
  struct Entry {
    float base, freq_scale;
    int rope_dim;
    float2* table;
  };
  DeviceMemory& memory_;
  std::vector<Entry> entries_;
};

}  // namespace cellm::cuda
