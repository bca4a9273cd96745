#pragma once
// The CUDA driver-API functions cellm uses (virtual memory management, device attributes),
// resolved at first use through the runtime (cudaGetDriverEntryPointByVersion) instead of
// linking libcuda: binaries then start on machines without a GPU driver and report "no GPU"
// instead of failing to load.
#include <cuda.h>

namespace cellm::cuda {

struct DriverApi {
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  bool complete = false;  // every entry above was found
};

// The table, resolved once (after the runtime has initialised a device). Entries that could
// not be found are null and `complete` is false.
const DriverApi& driver_api();

// Whether `device` supports virtual memory management (false when it cannot be determined).
bool device_supports_vmm(int device);

}  // namespace cellm::cuda
