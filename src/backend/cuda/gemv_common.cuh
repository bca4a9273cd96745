#pragma once
// Device helpers shared by the exact matmul kernels (gemv.cu, gemm_exact.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace cellm::cuda::exact {

// 16 bytes global -> shared without passing through registers (both 16-byte aligned), to a
// shared-window address (__cvta_generic_to_shared's) or a generic pointer.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  cp_async16(static_cast<unsigned>(__cvta_generic_to_shared(smem)), gmem);
}
// 4 bytes global -> shared (both 4-byte aligned), through L1.
__device__ __forceinline__ void cp_async4(unsigned dst, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  cp_async4(static_cast<unsigned>(__cvta_generic_to_shared(smem)), gmem);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Hopper's bulk copies (one instruction moves a whole contiguous run, the copy engine does the
// addressing) complete on an mbarrier in shared memory; a thread waits on the barrier's phase.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// A barrier that completes a phase once one thread has arrived and the bytes it announced landed.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(bar)) : "memory");
}
// Makes initialized barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// This thread's arrival for the current phase, which then also waits for `bytes` of copies.
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
// Returns once the phase with parity `parity` (0 for the first, 1 for the second, ...) completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared, counted on bar.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(smem)),
               "l"(gmem), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}
// Orders this thread's earlier shared-memory reads before copies issued after it into the
// same bytes (the copy engine is another proxy).
__device__ __forceinline__ void fence_before_bulk_copy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

// |v| < 2^22 as a float, exactly, without the slow integer conversion: a 32-element block's
// integer sum is at most 32 * 128 * 127 in magnitude.
__device__ __forceinline__ float small_int_to_float(int v) {
  return __fsub_rn(__int_as_float(v + 0x4B400000), 12582912.0f);
}

}  // namespace cellm::cuda::exact
