#pragma once
// CUDA status codes turned into cellm errors. Allocation failures become OutOfMemory so the
// cache can refuse a step cleanly; anything else is Internal (a bug or a broken device).
#include <cuda.h>
#include <cuda_runtime.h>

namespace cellm::cuda {

// Throws when err is not cudaSuccess, naming `what` and CUDA's description. Clears the
// runtime's sticky last-error slot first so a handled failure does not resurface later.
void check(cudaError_t err, const char* what);
void check(CUresult err, const char* what);

// Makes `device` current on the calling thread (the executor may run on a thread other than
// the one that built the backend); cheap when it already is.
void use_device(int device);

}  // namespace cellm::cuda
