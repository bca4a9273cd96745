#include "backend/cuda/cuda_check.h"

#include "backend/cuda/driver_api.h"
#include "core/error.h"

namespace cellm::cuda {

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  if (err == cudaErrorMemoryAllocation)
    fail(ErrorCode::OutOfMemory, what, ": out of device memory (", cudaGetErrorString(err), ")");
  fail(ErrorCode::Internal, what, ": CUDA error ", static_cast<int>(err), " (", cudaGetErrorString(err), ")");
}

void check(CUresult err, const char* what) {
  if (err == CUDA_SUCCESS) return;
  const char* text = nullptr;
  const DriverApi& api = driver_api();
  if (api.get_error_string == nullptr || api.get_error_string(err, &text) != CUDA_SUCCESS || text == nullptr)
    text = "unknown";
  if (err == CUDA_ERROR_OUT_OF_MEMORY)
    fail(ErrorCode::OutOfMemory, what, ": out of device memory (", text, ")");
  fail(ErrorCode::Internal, what, ": CUDA driver error ", static_cast<int>(err), " (", text, ")");
}

void use_device(int device) {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) check(cudaSetDevice(device), "cudaSetDevice");
}

}  // namespace cellm::cuda
