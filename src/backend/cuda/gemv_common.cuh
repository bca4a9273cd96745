#pragma once
// Device helpers shared by the exact matmul kernels (gemv.cu, gemm_exact.cu).
#include <cuda_runtime.h>

namespace cellm::cuda::exact {

// 16 bytes global -> shared without passing through registers (both 16-byte aligned).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// |v| < 2^22 as a float, exactly, without the slow integer conversion: a 32-element block's
// integer sum is at most 32 * 128 * 127 in magnitude.
__device__ __forceinline__ float small_int_to_float(int v) {
  return __fsub_rn(__int_as_float(v + 0x4B400000), 12582912.0f);
}

}  // namespace cellm::cuda::exact
