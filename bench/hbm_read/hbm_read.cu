// The GPU's measured HBM read bandwidth: the denominator of a decode step's roofline (weight
// bytes a token reads / this rate). A plain streaming read of a buffer far larger than L2 (16-byte
// loads, several in flight per thread, grid-stride), timed with events over repeated passes, for
// a few launch shapes; prints one JSON object per shape and a last one with the best. The
// product kernels' own weight stream (CudaPerf.GemvModelShapes) is only a lower bound of this.
// It asserts nothing.
//
// H100 80GB HBM3, 2 GiB, 20 passes (stop 37): 3086-3146 GB/s over the six shapes, where the
// fastest one-row product streamed 2787 GB/s (the Q6_K output matrix of llama3-8b's shape).
//
//   bench_cuda_hbm_read [--gib 2] [--passes 20]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench_cuda_hbm_read: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// Reads every 16-byte word of [data, data + words) once; kInFlight loads per thread are issued
// before any is used. The XOR of what was read goes out only if it equals a value the buffer
// (zeros) never gives, so the loads are kept and nothing is written.
template <int kInFlight>
__global__ void read_kernel(const int4* __restrict__ data, size_t words, int* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int acc = 0;
  for (; i + (kInFlight - 1) * stride < words; i += kInFlight * stride) {
    int4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = __ldcs(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < words; i += stride) {
    const int4 v = __ldcs(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x5eed1234) *sink = acc;
}

struct Shape {
  int blocks_per_sm, threads, in_flight;
};

template <int kInFlight>
void launch(const Shape& s, int sms, const int4* data, size_t words, int* sink) {
  read_kernel<kInFlight><<<s.blocks_per_sm * sms, s.threads>>>(data, words, sink);
}

void launch_shape(const Shape& s, int sms, const int4* data, size_t words, int* sink) {
  if (s.in_flight == 4) launch<4>(s, sms, data, words, sink);
  else launch<8>(s, sms, data, words, sink);
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 2.0;
  int passes = 20;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if ((flag != "--gib" && flag != "--passes") || i + 1 == argc) {
      std::fprintf(stderr, "bench_cuda_hbm_read: %s flag %s (--gib G, --passes N)\n",
                   i + 1 == argc ? "no value after" : "unknown", flag.c_str());
      return 2;
    }
    if (flag == "--gib") gib = std::atof(argv[i + 1]);
    else passes = std::atoi(argv[i + 1]);
  }
  if (gib <= 0 || passes <= 0) {
    std::fprintf(stderr, "bench_cuda_hbm_read: --gib and --passes must be positive\n");
    return 2;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  const size_t bytes = static_cast<size_t>(gib * (1u << 30)) / 16 * 16;
  int4* data = nullptr;
  int* sink = nullptr;
  check(cudaMalloc(&data, bytes), "allocating the buffer");
  check(cudaMalloc(&sink, sizeof(int)), "allocating the sink");
  check(cudaMemset(data, 0, bytes), "clearing the buffer");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  const Shape shapes[] = {{2, 512, 4}, {2, 512, 8}, {4, 256, 4}, {4, 256, 8}, {8, 256, 4}, {2, 1024, 4}};
  double best = 0;
  for (const Shape& s : shapes) {
    launch_shape(s, prop.multiProcessorCount, data, bytes / 16, sink);  // warm-up
    check(cudaEventRecord(start), "record");
    for (int p = 0; p < passes; ++p) launch_shape(s, prop.multiProcessorCount, data, bytes / 16, sink);
    check(cudaGetLastError(), "launching the reads");  // a failed launch would time nothing
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "running the reads");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed time");
    const double gbps = static_cast<double>(bytes) * passes / (ms * 1e-3) / 1e9;
    best = gbps > best ? gbps : best;
    std::printf("{\"blocks_per_sm\": %d, \"threads\": %d, \"loads_in_flight\": %d, \"read_gb_s\": %.1f}\n",
                s.blocks_per_sm, s.threads, s.in_flight, gbps);
  }
  std::printf("{\"device\": \"%s\", \"buffer_bytes\": %zu, \"passes\": %d, \"best_read_gb_s\": %.1f}\n", prop.name, bytes,
              passes, best);
  return 0;
}
