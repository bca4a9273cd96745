#pragma once
// Device allocations of one backend with their accounting (what it holds now and its peak),
// shared by the backend's buffers, weights, scratch and KV pools so memory_stats() sees all.
#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace cellm::cuda {

class DeviceMemory {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  int device() const { return device_; }
  // cudaMalloc; throws OutOfMemory naming `what` and the size. A request larger than the
  // device's whole memory is refused without asking the driver, so an impossible size is not
  // a CUDA API error (compute-sanitizer counts those).
  void* allocate(size_t bytes, const char* what);
  // cudaFree of a pointer from allocate (null is ignored). Waits for the device, as cudaFree does.
  void release(void* p);
  // Memory obtained elsewhere (virtual-memory mappings): counted the same way.
  void add(size_t bytes);
  void remove(size_t bytes);

  size_t allocated() const { return allocated_.load(); }
  size_t peak() const { return peak_.load(); }

 private:
  int device_;
  std::atomic<size_t> total_{0};  // the device's memory, once asked
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  std::atomic<size_t> allocated_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace cellm::cuda
