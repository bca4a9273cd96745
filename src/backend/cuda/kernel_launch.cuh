#pragma once
// Every kernel of this backend is launched through launch_kernel, which lets it start before
// the kernel ahead of it in the stream has finished (Hopper's programmatic dependent launch)
// where that pays (early_launch_shared_bytes below: forwards of few rows, grids of one wave).
// Why: a decode step is hundreds of kernels of a few microseconds each, and between two of them
// the device otherwise sits idle while the first drains, its writes are flushed and the second
// is launched and ramps up. With the early launch the second kernel's blocks are already
// resident, and a matrix product's first weights (which no kernel writes) are on their way,
// when the first kernel ends.
//
// The rule that keeps this exact: a kernel launched here calls wait_for_inputs() in every block
// before it reads anything another kernel writes and before it writes anything (another kernel
// may still read it). wait_for_inputs() returns once the previous kernel has completed and its
// memory is visible; since that kernel waited for its own predecessor, the whole stream order
// holds. Only data no kernel of the step writes may be read before it: weights, tables built at
// load, the step's buffers the host uploads (tokens, positions, cells, page lists, the cell
// table), whose copies the stream orders before the step's first kernel, and the KV pool rows of
// cells the step does not write (attention.cu's staged kernel), which earlier steps wrote: the
// host waits for a step's output before it starts the next one.
#include <cuda_runtime.h>

#include <optional>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace cellm::cuda {

// Returns once the kernel launched before this one has completed and its writes are visible.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asks for [p, p + bytes) - data no kernel writes (weights, tables) - to come to this SM's L1,
// a 128-byte line per thread of the block. Called before wait_for_inputs(), a kernel started
// early has them at hand when the wait returns instead of waiting a trip to L2 after it.
__device__ __forceinline__ void prefetch_read_only(const void* p, size_t bytes) {
#if defined(__CUDA_ARCH__)
  const char* c = static_cast<const char*>(p);
  for (size_t at = 128 * size_t{threadIdx.x}; at < bytes; at += 128 * size_t{blockDim.x})
    asm volatile("prefetch.global.L1 [%0];" ::"l"(c + at));
#endif
}

// Lets the next kernel of the stream be launched now: its blocks become resident and run up to
// their own wait_for_inputs(). Called first thing, for the most overlap; the next kernel
// launches only when every block of this one has called it. Whether that pays is decided at
// launch (early_launch_shared_bytes): measured, it did for one-row steps and not at 64 rows.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Whether a launch of `kernel` starts early, and if so the dynamic shared memory it asks for;
// nullopt where it does not. One lookup of the device's facts serves both answers (launches
// happen hundreds of times per step).
//
// It starts early where early launches are on for this thread (set_early_launches, kernels.h),
// the device honours them (compute capability 9.0 and later; older devices get plain
// stream-ordered launches of the same kernels, whose waits are then no-ops) and the whole grid is
// resident at once. A grid of several waves starts in order: a one-row decode step's attention
// (a block per head and context slot, most of which find nothing to do) ran slower early
// (llama3-8b batch 1 352.4 -> 373.3 tok/s when it stopped).
//
// Started early, it asks for shared_bytes, or more, so that no multiprocessor can hold more of
// its blocks than an even spread needs (the blocks over the multiprocessors, rounded up), where
// that is at most kSpreadMaxBlocksPerSm. Why: a grid started early is placed while the kernel
// ahead still holds most multiprocessors, and the scheduler packs its blocks onto the few that
// are free, as many as fit; a block that walks a whole row of weights alone then shares its
// multiprocessor with three others while most multiprocessors idle. kernel_launch.cpp has the
// figures.
inline constexpr int kSpreadMaxBlocksPerSm = 2;
std::optional<size_t> early_launch_shared_bytes(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes);

// How many blocks of `kernel` (threads, dynamic shared memory) one multiprocessor of the current
// device holds at once; asked of the driver once per (device, kernel, threads, shared memory).
int resident_blocks_per_sm(const void* kernel, int threads, size_t shared_bytes);

template <class... Params, class... Args>
void launch_kernel(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &early;
  const std::optional<size_t> early_bytes =
      early_launch_shared_bytes(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes);
  config.numAttrs = early_bytes ? 1 : 0;
  if (early_bytes) config.dynamicSmemBytes = *early_bytes;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace cellm::cuda
