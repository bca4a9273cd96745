#pragma once
// The CUDA backend: one device, one stream that every kernel and copy of the backend is issued
// on, weights copied to the device once, the KV pool in device memory (device_kv_storage.h).
// Kernel calls only enqueue work: no host synchronisation and no allocation happen inside
// them (download() and synchronize() wait), so a whole forward can be captured into a CUDA
// graph. Scratch (matmul, attention) is allocated when the backend is created.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/device_kv_storage.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/rope_table.h"

namespace cellm::cuda {

class Matmul;

// Throws Unsupported when the device is missing or cannot run this build's kernels.
std::unique_ptr<backend::Backend> create_cuda_backend(int device);

class CudaBackend final : public backend::Backend {
 public:
  using TensorRef = backend::TensorRef;
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string description() const override;

  void* allocate(size_t bytes, const char* what) override;
  void release(void* p) override;
  void* allocate_host(size_t bytes, const char* what) override;  // page-locked (cudaMallocHost)
  void release_host(void* p) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  TensorRef place_weight(const TensorRef& host_weight, const std::string& name) override;
  TensorRef place_stacked_weight(std::span<const TensorRef> host_parts, const std::string& name) override {
    return backend::place_joined_copy(*this, host_parts, name);  // joined once, on the device
  }
  std::unique_ptr<kv::KvStorage> create_kv_storage(size_t bytes_per_row) override;
  backend::MemoryStats memory_stats() const override;

  void embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) override;
  void rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) override;
  void matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) override;
  void rms_norm_matmul(const TensorRef& x, const float* weight, float eps, const TensorRef& normed, const TensorRef& w,
                       const float* bias, const TensorRef& out) override;
  void matmul_add(const TensorRef& x, const TensorRef& w, const TensorRef& residual, const TensorRef& out) override;
  void rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) override;
  void kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) override;
  void rope_kv_store(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params,
                     const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) override;
  void attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                 const TensorRef& out) override;
  void add(const TensorRef& a, const TensorRef& b, const TensorRef& out) override;
  void glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) override;
  void rope_kv_store_attention(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params,
                               const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst,
                               const TensorRef& q, const backend::PagedKv& kv, float scale, const TensorRef& attn_out,
                               const TensorRef* w, const float* bias, const TensorRef* residual,
                               const TensorRef& out) override;
  void attention_matmul(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                        const TensorRef& attn_out, const TensorRef& w, const float* bias, const TensorRef* residual,
                        const TensorRef& out) override;
  void glu_matmul(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& glu_out,
                  const TensorRef& w, const float* bias, const TensorRef* residual, const TensorRef& out) override;
  void gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) override;
  void argmax_rows(const TensorRef& logits, int32_t* out) override;
  void synchronize() override;
  bool static_decode_shapes() const override { return true; }
  bool supports_graphs() const override { return true; }
  void begin_forward(int64_t rows) override;
  void begin_capture() override;
  std::unique_ptr<backend::Graph> end_capture() override;

  // --- beyond the Backend interface (tests, benchmarks, graph capture) -----------------------
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  bool vmm_supported() const { return vmm_supported_; }
  KvGrowth default_kv_growth() const { return kv_growth_; }
  std::unique_ptr<DeviceKvStorage> create_kv_storage(size_t bytes_per_row, KvGrowth growth);
  // The tensor-core matmul path whatever the row count.
  void matmul_gemm(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out);

 private:
  AttentionWorkspace attention_workspace() const;
  void free_all();

  int device_;
  std::string device_name_;
  int sm_major_ = 0, sm_minor_ = 0;
  int sm_count_ = 1;
  bool vmm_supported_ = false;
  KvGrowth kv_growth_ = KvGrowth::Copy;
  cudaStream_t stream_ = nullptr;
  DeviceMemory memory_;
  std::unique_ptr<Matmul> matmul_;
  std::unique_ptr<RopeTables> rope_tables_;
  float* attention_partials_ = nullptr;
  size_t attention_partials_floats_ = 0;
  unsigned* attention_arrivals_ = nullptr;
  ArgmaxWorkspace argmax_workspace_;
};

}  // namespace cellm::cuda
