#include <array>
#include <atomic>

#include "backend/cuda/kernel_launch.cuh"

namespace cellm::cuda {

bool early_launch_supported() {
  // Asked once per device: launches happen hundreds of times per step.
  constexpr int kDevices = 64;
  static std::array<std::atomic<int>, kDevices> known{};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (device < 0 || device >= kDevices) return false;
  int state = known[device].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
    state = major >= 9 ? 2 : 1;
    known[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

}  // namespace cellm::cuda
