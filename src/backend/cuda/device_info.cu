#include <cuda_runtime.h>

#include "backend/cuda/device_info.h"
#include "backend/cuda/driver_api.h"

namespace cellm::cuda {

DeviceInfo query_device(int device) {
  DeviceInfo info;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.reason = cudaGetErrorString(err);
    return info;
  }
  if (device >= count) {
    info.reason = count == 0 ? "no CUDA device found" : "CUDA device index out of range";
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    info.reason = "cannot read CUDA device properties";
    return info;
  }
  info.available = true;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.total_memory = prop.totalGlobalMem;
  int vmm = 0;
  CUdevice dev;
  const DriverApi& api = driver_api();
  if (api.complete && api.device_get(&dev, device) == CUDA_SUCCESS &&
      api.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) == CUDA_SUCCESS)
    info.vmm_supported = vmm != 0;
  return info;
}

}  // namespace cellm::cuda
