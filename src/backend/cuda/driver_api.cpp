#include "backend/cuda/driver_api.h"

#include <cuda_runtime.h>

namespace cellm::cuda {
namespace {

// The ABI version of the entry points we ask for (their signatures are unchanged since).
constexpr unsigned int kDriverApiVersion = 12000;

template <typename Fn>
bool resolve(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, kDriverApiVersion, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

DriverApi load() {
  DriverApi api;
  bool ok = true;
  ok &= resolve("cuGetErrorString", api.get_error_string);
  ok &= resolve("cuDeviceGet", api.device_get);
  ok &= resolve("cuDeviceGetAttribute", api.device_get_attribute);
  ok &= resolve("cuMemGetAllocationGranularity", api.mem_get_allocation_granularity);
  ok &= resolve("cuMemAddressReserve", api.mem_address_reserve);
  ok &= resolve("cuMemAddressFree", api.mem_address_free);
  ok &= resolve("cuMemCreate", api.mem_create);
  ok &= resolve("cuMemRelease", api.mem_release);
  ok &= resolve("cuMemMap", api.mem_map);
  ok &= resolve("cuMemUnmap", api.mem_unmap);
  ok &= resolve("cuMemSetAccess", api.mem_set_access);
  api.complete = ok;
  return api;
}

}  // namespace

const DriverApi& driver_api() {
  static const DriverApi api = load();
  return api;
}

bool device_supports_vmm(int device) {
  const DriverApi& api = driver_api();
  if (!api.complete) return false;
  CUdevice dev{};
  int supported = 0;
  if (api.device_get(&dev, device) != CUDA_SUCCESS) return false;
  if (api.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS)
    return false;
  return supported != 0;
}

}  // namespace cellm::cuda
