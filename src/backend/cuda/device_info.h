#pragma once
// Whether a CUDA device can be used here, and what it is. Safe to call on machines with no GPU
// or no driver: it reports that instead of failing.
#include <string>

namespace cellm::cuda {

struct DeviceInfo {
  bool available = false;
  std::string reason;  // why not, when unavailable
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  size_t total_memory = 0;
  bool vmm_supported = false;
};

DeviceInfo query_device(int device = 0);

}  // namespace cellm::cuda
