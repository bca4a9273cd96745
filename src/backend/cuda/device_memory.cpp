#include "backend/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace cellm::cuda {

void* DeviceMemory::allocate(size_t bytes, const char* what) {
  use_device(device_);
  if (total_.load() == 0) {
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    total_.store(total_bytes);
  }
  if (bytes > total_.load())
    fail(ErrorCode::OutOfMemory, "cannot allocate ", bytes, " bytes of device memory for ", what, ": the device has ",
         total_.load());
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      fail(ErrorCode::OutOfMemory, "cannot allocate ", bytes, " bytes of device memory for ", what);
    check(err, what);
  }
  {
    std::lock_guard lock(mutex_);
    sizes_[p] = bytes;
  }
  add(bytes);
  return p;
}

void DeviceMemory::release(void* p) {
  if (p == nullptr) return;
  size_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) fail(ErrorCode::Internal, "release of a pointer this CUDA backend did not allocate");
    bytes = it->second;
    sizes_.erase(it);
  }
  use_device(device_);
  check(cudaFree(p), "cudaFree");
  remove(bytes);
}

void DeviceMemory::add(size_t bytes) {
  const size_t now = allocated_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void DeviceMemory::remove(size_t bytes) { allocated_.fetch_sub(bytes); }

}  // namespace cellm::cuda
