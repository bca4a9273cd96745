#include "backend/cuda/kernel_launch.cuh"

#include <map>
#include <mutex>
#include <tuple>

namespace cellm::cuda {
namespace {

struct DeviceFacts {
  bool early = false;  // compute capability 9.0 or later
  int sm_count = 0;
};

// Asked once per device and once per (kernel, block, shared memory): launches happen hundreds of
// times per step.
std::mutex facts_mutex;
thread_local bool early_launches = false;

DeviceFacts device_facts(int device) {
  static std::map<int, DeviceFacts> known;
  std::lock_guard<std::mutex> lock(facts_mutex);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0, sms = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  return known[device] = DeviceFacts{major >= 9, sms};
}

int resident_blocks_on(int device, const void* kernel, int threads, size_t shared_bytes) {
  static std::map<std::tuple<int, const void*, int, size_t>, int> known;
  const auto key = std::make_tuple(device, kernel, threads, shared_bytes);
  {
    std::lock_guard<std::mutex> lock(facts_mutex);
    auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes), "kernel occupancy");
  std::lock_guard<std::mutex> lock(facts_mutex);
  return known[key] = blocks;
}

}  // namespace

void set_early_launches(bool on) { early_launches = on; }

int resident_blocks_per_sm(const void* kernel, int threads, size_t shared_bytes) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return resident_blocks_on(device, kernel, threads, shared_bytes);
}

bool may_start_early(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  if (!early_launches) return false;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceFacts facts = device_facts(device);
  if (!facts.early) return false;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const auto blocks = static_cast<size_t>(grid.x) * grid.y * grid.z;
  return blocks <= static_cast<size_t>(facts.sm_count) * resident_blocks_on(device, kernel, threads, shared_bytes);
}

}  // namespace cellm::cuda
