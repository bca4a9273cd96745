#include "backend/cuda/kernel_launch.cuh"

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace cellm::cuda {
namespace {

struct DeviceFacts {
  bool early = false;  // compute capability 9.0 or later
  int sm_count = 0;
  size_t sm_shared = 0;     // shared memory bytes a multiprocessor has
  size_t block_shared = 0;  // the most a block may ask for
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
  int major = 0, sms = 0, sm_shared = 0, block_shared = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  check(cudaDeviceGetAttribute(&sm_shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device), "SM shared memory");
  check(cudaDeviceGetAttribute(&block_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "block shared memory");
  return known[device] =
             DeviceFacts{major >= 9, sms, static_cast<size_t>(sm_shared), static_cast<size_t>(block_shared)};
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

// Measured on H100, one run, two rounds alternated (generation tok/s):
//  - as gemm_exact.cu's own rule first (every grid of the tensor-core product of one block a
//    multiprocessor or fewer): llama3-8b Q4_K batch 16 2400 / 2386 -> 2783 / 2778. Kernel trace
//    at batch 16: its 4096-row products (128 blocks) spread over 128 multiprocessors, o 21.2 ->
//    12.3 us a call, down 54.3 -> 42.3; it had been packed four to a multiprocessor behind the
//    GLU's kernel, which started early during gate/up (cuda_backend.cpp's product_addend);
//  - up to two a multiprocessor (q/k/v's 192 blocks at 16 rows): 2802 / 2806 -> 2927 / 2932;
//  - here, for every kernel that starts early, against the tensor-core product's rule alone:
//    SmolLM2's shape (Q4_1, whose small products are grids of 72-120 blocks) batch 1 1500 / 1504
//    -> 1524 / 1548, batch 8 5269 / 5224 -> 6127 / 6181 (1.17x); llama3-8b batch 8 1669 / 1672 ->
//    1702 / 1702, batch 16 2902 / 2919 -> 2986 / 2989, batch 1 453 / 455 -> 456 / 457.
// Early launches up to 64 rows as well (kEarlyLaunchMaxRows) then gained nothing clear: batch
// 32 4544 / 4544 -> 4575 / 4597, batch 64 6178 / 6261 -> 6238 / 6252.
size_t early_spread_shared_bytes(int device, const DeviceFacts& facts, const void* kernel, dim3 grid,
                                 size_t shared_bytes) {
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  const int64_t spread = (blocks + facts.sm_count - 1) / facts.sm_count;
  if (spread > kSpreadMaxBlocksPerSm) return shared_bytes;
  // A block's share: one block more than `spread` must not fit (the driver also reserves 1 KB a
  // block, so the share itself still fits `spread` times).
  const size_t share = facts.sm_shared / static_cast<size_t>(spread + 1);
  // Per (device, kernel): its static shared memory and the dynamic amount it may ask for now
  // (raised here only, never lowered: a launcher may have raised it for its own needs).
  static std::map<std::pair<int, const void*>, std::pair<size_t, size_t>> kernels;
  std::lock_guard<std::mutex> lock(facts_mutex);
  auto it = kernels.find({device, kernel});
  if (it == kernels.end()) {
    cudaFuncAttributes attrs{};
    check(cudaFuncGetAttributes(&attrs, kernel), "kernel attributes");
    const auto dynamic_now = static_cast<size_t>(attrs.maxDynamicSharedSizeBytes);
    it = kernels.emplace(std::make_pair(device, kernel), std::make_pair(attrs.sharedSizeBytes, dynamic_now)).first;
  }
  const auto [static_bytes, allowed] = it->second;
  if (share <= static_bytes + shared_bytes || share > facts.block_shared) return shared_bytes;
  const size_t dynamic = share - static_bytes;
  if (allowed < dynamic) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic)),
          "kernel shared memory");
    it->second.second = dynamic;
  }
  return dynamic;
}

}  // namespace

void set_early_launches(bool on) { early_launches = on; }

int resident_blocks_per_sm(const void* kernel, int threads, size_t shared_bytes) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return resident_blocks_on(device, kernel, threads, shared_bytes);
}

std::optional<size_t> early_launch_shared_bytes(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  if (!early_launches) return std::nullopt;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceFacts facts = device_facts(device);
  if (!facts.early) return std::nullopt;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const auto blocks = static_cast<size_t>(grid.x) * grid.y * grid.z;
  if (blocks > static_cast<size_t>(facts.sm_count) * resident_blocks_on(device, kernel, threads, shared_bytes))
    return std::nullopt;
  return early_spread_shared_bytes(device, facts, kernel, grid, shared_bytes);
}

}  // namespace cellm::cuda
