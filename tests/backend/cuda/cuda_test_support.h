#pragma once
// Shared by the CUDA backend tests: the GPU backend (one per test program, created on first
// use), a CPU backend to compare against, device copies of host data, random inputs.
// Every test starts with CELLM_REQUIRE_GPU, which skips it on machines without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_info.h"
#include "core/error.h"
#include "gguf/quantize.h"

namespace cellm::cuda::testing {

using backend::TensorRef;

struct GpuState {
  std::unique_ptr<CudaBackend> backend;
  std::string skip_reason;
  std::string error;
};

inline GpuState& gpu_state() {
  static GpuState state = [] {
    GpuState s;
    const DeviceInfo info = query_device(0);
    if (!info.available) {
      s.skip_reason = info.reason;
      return s;
    }
    try {
      s.backend = std::make_unique<CudaBackend>(0);
    } catch (const Error& e) {
      s.error = e.what();
    }
    return s;
  }();
  return state;
}

inline cpu::CpuBackend& cpu_backend() {
  static cpu::CpuBackend backend(0);
  return backend;
}

// Skips the test without a GPU; fails it when a GPU is there but the backend cannot start.
#define CELLM_REQUIRE_GPU(var)                                                                           \
  auto& var##_state = ::cellm::cuda::testing::gpu_state();                                              \
  if (!var##_state.error.empty()) FAIL() << "a GPU is present but the CUDA backend failed: " << var##_state.error; \
  if (!var##_state.backend) GTEST_SKIP() << "no usable CUDA GPU (" << var##_state.skip_reason << ")";     \
  ::cellm::cuda::CudaBackend& var = *var##_state.backend

// A device allocation of the shared backend, freed by the destructor.
class DeviceBuffer {
 public:
  DeviceBuffer(CudaBackend& gpu, size_t bytes) : gpu_(gpu), bytes_(bytes), data_(gpu.allocate(bytes, "test buffer")) {}
  template <typename T>
  DeviceBuffer(CudaBackend& gpu, const std::vector<T>& host) : DeviceBuffer(gpu, std::max<size_t>(1, host.size() * sizeof(T))) {
    gpu.upload(data_, host.data(), host.size() * sizeof(T));
  }
  ~DeviceBuffer() { gpu_.release(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // Every byte set to `byte` (0xFF: every float a NaN, so an output never written shows).
  void fill(uint8_t byte) { gpu_.upload(data_, std::vector<uint8_t>(bytes_, byte).data(), bytes_); }
  template <typename T>
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    gpu_.download(host.data(), data_, count * sizeof(T));
    return host;
  }

 private:
  CudaBackend& gpu_;
  size_t bytes_;
  void* data_;
};

// Row-major f32 rows on the host, with views for either backend.
struct Rows {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;

  Rows() = default;
  Rows(int64_t r, int64_t c, float fill = 0.0f) : rows(r), cols(c), values(static_cast<size_t>(r * c), fill) {}
  float* row(int64_t r) { return values.data() + r * cols; }
  const float* row(int64_t r) const { return values.data() + r * cols; }
  TensorRef host_ref() const {
    return {const_cast<float*>(values.data()), DType::F32, rows, cols, static_cast<size_t>(cols) * sizeof(float)};
  }
  static TensorRef device_ref(const DeviceBuffer& b, int64_t rows, int64_t cols) {
    return {b.data(), DType::F32, rows, cols, static_cast<size_t>(cols) * sizeof(float)};
  }
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Rows random_rows(int64_t rows, int64_t cols, uint32_t seed, float stddev = 1.0f) {
  Rows r(rows, cols);
  r.values = random_floats(r.values.size(), seed, stddev);
  return r;
}

// A weight matrix in GGUF layout on the host (rows x cols of `type`).
struct HostWeight {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> bytes;

  TensorRef ref() { return {bytes.data(), type, rows, cols, row_bytes(type, cols)}; }
};

inline HostWeight quantized_weight(DType type, const Rows& source) {
  HostWeight w{type, source.rows, source.cols, {}};
  const size_t stride = row_bytes(type, source.cols);
  w.bytes.resize(stride * static_cast<size_t>(source.rows));
  for (int64_t r = 0; r < source.rows; ++r) {
    uint8_t* dst = w.bytes.data() + static_cast<size_t>(r) * stride;
    if (type == DType::F32)
      std::memcpy(dst, source.row(r), stride);
    else
      gguf::quantize_row(type, source.row(r), dst, source.cols);
  }
  return w;
}

// The weight formats cellm computes with (DESIGN.md section 2).
inline const std::vector<DType>& weight_formats() {
  static const std::vector<DType> formats = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                             DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                             DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return formats;
}

}  // namespace cellm::cuda::testing
