// What one kernel boundary costs a decode step captured as a CUDA graph: a chain of small
// kernels, each reading what another block of the one before wrote, timed per kernel for four
// ways of waiting.
//  - stream: plain stream order (each kernel launched once the one before has completed);
//  - grid wait: launched early (programmatic dependent launch), every block waits in
//    griddepcontrol.wait for the whole previous grid to complete and flush - how the backend's
//    kernels wait today (backend/cuda/kernel_launch.cuh);
//  - flag: launched early too, but a block waits only for a counter the previous kernel's
//    blocks raise (release) after their last write, read with acquire by one thread;
//  - barrier: no boundary at all - ONE persistent kernel runs the chain's steps in turn, its
//    blocks meeting at a grid barrier between steps (each block raises a counter with release
//    after its writes; one thread per block polls it with acquire). What a step would cost a
//    decode pass written as one long-lived kernel (a "megakernel") instead of a kernel per op.
// A step of llama3-8b is ~260 kernels and of SmolLM2 ~245, so a microsecond a boundary is a
// large share of it. Prints one JSON object per (mode, grid); it asserts nothing.
//
// H200, 256 kernels of 128 threads, 50 replays, us per kernel (stream / grid wait / flag), each
// kernel reading its own block's values: 1 block 0.84 / 0.53 / 0.94, 32 blocks 1.02 / 0.77 /
// 2.02, 132 blocks 1.05 / 0.81 / 3.75, 264 blocks 1.09 / 0.85 / 4.22. Flags lose because each
// kernel launches its successor as it starts, so the blocks of several kernels down the chain
// are resident at once, spinning on their counters.
// H100, the same, each reading the next block's values (stop 52, one run; stream / grid wait /
// flag / barrier): 1 block 0.97 / 0.79 / 1.12 / 0.77, 32 blocks 1.13 / 0.82 / 2.18 / 1.07, 132
// blocks 1.16 / 0.82 / 4.05 / 1.19, 264 blocks 1.18 / 0.86 / 4.52 / 1.63. The grid wait is the
// cheapest way across a whole grid: ~0.8 us a boundary. A grid barrier inside one kernel costs
// more (every block's arrival goes through one counter in L2), so a megakernel would not save
// the boundaries; the backend's small kernels (2-3 us each on a decode step's critical path)
// spend most of their time in their own work.
//
//   bench_cuda_kernel_boundary [--kernels 256] [--replays 50]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

enum class Wait { Stream, Grid, Flag, Barrier };

const char* name_of(Wait w) {
  return w == Wait::Stream ? "stream" : w == Wait::Grid ? "grid wait" : w == Wait::Flag ? "flag" : "barrier";
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench_cuda_kernel_boundary: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

struct Link {
  const float* in;
  float* out;
  int in_threads;          // threads of the previous kernel (values it wrote)
  const unsigned* ready;   // Flag: blocks of the previous kernel done (null for the first kernel)
  unsigned ready_count;    // how many blocks that is
  unsigned* done;          // Flag: this kernel's count
};

template <Wait kWait>
__global__ void link_kernel(Link a) {
  if constexpr (kWait != Wait::Stream) asm volatile("griddepcontrol.launch_dependents;" :::);
  if constexpr (kWait == Wait::Grid) asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (kWait == Wait::Flag) {
    if (threadIdx.x == 0 && a.ready != nullptr) {
      unsigned seen = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(a.ready) : "memory");
      } while (seen < a.ready_count);
    }
    __syncthreads();
  }
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  a.out[i] = a.in[(i + blockDim.x) % a.in_threads] + 1.0f;  // the next block's value: a wait must cover other blocks
  if constexpr (kWait == Wait::Flag) {
    __syncthreads();  // the block's writes, then one release publishes them
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.done), "r"(1u) : "memory");
  }
}

// The whole chain in one launch: step k reads buffer k % 2 and writes the other, as the chain's
// kernel k does, then every block meets at the barrier (a counter that only grows: after step k
// it reaches (k + 1) x blocks). Every block must be resident at once (the grids timed here are
// at most two a multiprocessor of 128 threads).
__global__ void persistent_chain_kernel(float* buffers, int values, int steps, unsigned* arrived) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  for (int k = 0; k < steps; ++k) {
    const float* in = buffers + (k % 2) * values;
    float* out = buffers + ((k + 1) % 2) * values;
    out[i] = in[(i + blockDim.x) % values] + 1.0f;  // the next block's value, as link_kernel reads
    __syncthreads();  // the block's writes, then one release publishes them
    if (threadIdx.x == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(arrived), "r"(1u) : "memory");
      const unsigned target = static_cast<unsigned>(k + 1) * gridDim.x;
      unsigned seen = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrived) : "memory");
      } while (seen < target);
    }
    __syncthreads();
  }
}

template <Wait kWait>
void launch(const Link& link, int blocks, int threads, cudaStream_t stream) {
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = kWait == Wait::Stream ? 0 : 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  config.attrs = &early;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, link_kernel<kWait>, link), "launch");
}

// Microseconds per kernel of a captured chain of `kernels` kernels of `blocks` x 128 threads.
double time_chain(Wait wait, int kernels, int blocks, int replays, float* final_value) {
  constexpr int kThreads = 128;
  const int values = blocks * kThreads;
  float* buffers = nullptr;
  unsigned* counters = nullptr;
  check(cudaMalloc(&buffers, sizeof(float) * values * 2), "cudaMalloc");
  check(cudaMalloc(&counters, sizeof(unsigned) * kernels), "cudaMalloc");
  check(cudaMemset(buffers, 0, sizeof(float) * values * 2), "cudaMemset");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  check(cudaMemsetAsync(buffers, 0, sizeof(float) * values, stream), "memset");  // every replay counts from 0
  check(cudaMemsetAsync(counters, 0, sizeof(unsigned) * kernels, stream), "memset");
  if (wait == Wait::Barrier) {
    persistent_chain_kernel<<<blocks, kThreads, 0, stream>>>(buffers, values, kernels, counters);
    check(cudaGetLastError(), "launch");
  }
  for (int k = 0; wait != Wait::Barrier && k < kernels; ++k) {
    Link link{buffers + (k % 2) * values, buffers + ((k + 1) % 2) * values, values,
              k == 0 ? nullptr : counters + k - 1, static_cast<unsigned>(blocks), counters + k};
    if (wait == Wait::Stream) launch<Wait::Stream>(link, blocks, kThreads, stream);
    else if (wait == Wait::Grid) launch<Wait::Grid>(link, blocks, kThreads, stream);
    else launch<Wait::Flag>(link, blocks, kThreads, stream);
  }
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(exec, stream), "warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  check(cudaEventRecord(start, stream), "record");
  for (int i = 0; i < replays; ++i) check(cudaGraphLaunch(exec, stream), "replay");
  check(cudaEventRecord(stop, stream), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  // The chain adds 1 per kernel: the last kernel's values say whether every wait held.
  check(cudaMemcpy(final_value, buffers + (kernels % 2) * values + values - 1, sizeof(float), cudaMemcpyDeviceToHost),
        "copy");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(buffers);
  cudaFree(counters);
  return 1000.0 * ms / (static_cast<double>(replays) * kernels);
}

}  // namespace

int main(int argc, char** argv) {
  int kernels = 256, replays = 50;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const bool known = flag == "--kernels" || flag == "--replays";
    if (!known || i + 1 >= argc) {
      const bool help = flag == "--help";
      std::fprintf(help ? stdout : stderr, "usage: bench_cuda_kernel_boundary [--kernels N (256)] [--replays N (50)]\n");
      return help ? 0 : 2;
    }
    (flag == "--kernels" ? kernels : replays) = std::atoi(argv[i + 1]);
  }
  if (kernels < 2 || replays < 1) {
    std::fprintf(stderr, "bench_cuda_kernel_boundary: --kernels must be >= 2 and --replays >= 1\n");
    return 2;
  }
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  for (int blocks : {1, 32, sms, 2 * sms}) {
    for (Wait wait : {Wait::Stream, Wait::Grid, Wait::Flag, Wait::Barrier}) {
      float last = 0;
      const double us = time_chain(wait, kernels, blocks, replays, &last);
      std::printf("{\"mode\": \"%s\", \"blocks\": %d, \"kernels\": %d, \"us_per_kernel\": %.3f, \"chain_ok\": %s}\n",
                  name_of(wait), blocks, kernels, us, last == static_cast<float>(kernels) ? "true" : "false");
    }
  }
  return 0;
}
