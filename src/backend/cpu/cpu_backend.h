#pragma once
// The CPU backend: kernels on a thread pool, weights used in place from the mapped GGUF file,
// the KV pool in host memory.
#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "core/thread_pool.h"

namespace cellm::cpu {

class CpuBackend : public backend::Backend {
 public:
  using TensorRef = backend::TensorRef;
  explicit CpuBackend(int n_threads);  // <= 0: every hardware thread

  std::string name() const override { return "cpu"; }
  std::string description() const override;

  void* allocate(size_t bytes, const char* what) override;
  void release(void* p) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  TensorRef place_weight(const TensorRef& host_weight, const std::string& name) override;
  // Keeps the parts where the file maps them (no copy); matmul walks them in order.
  static constexpr size_t kMostStackedParts = 8;
  TensorRef place_stacked_weight(std::span<const TensorRef> host_parts, const std::string& name) override;
  std::unique_ptr<kv::KvStorage> create_kv_storage(size_t bytes_per_row) override;
  backend::MemoryStats memory_stats() const override;

  void embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) override;
  void rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) override;
  void matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) override;
  void rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) override;
  void kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) override;
  void attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                 const TensorRef& out) override;
  void add(const TensorRef& a, const TensorRef& b, const TensorRef& out) override;
  void glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) override;
  void gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) override;
  void argmax_rows(const TensorRef& logits, int32_t* out) override;
  void synchronize() override {}

  ThreadPool& pool() { return pool_; }
  ThreadPool* host_threads() override { return &pool_; }

 protected:
  // A weight's matrices (several for a stacked weight) in `storage`: no allocation per call.
  static std::span<const WeightMatrix> weight_parts(const TensorRef& w,
                                                    std::array<WeightMatrix, kMostStackedParts>& storage);

 private:
  ThreadPool pool_;
  MatmulScratch scratch_;
  std::deque<std::vector<TensorRef>> stacked_parts_;  // what placed stacked weights point to
  std::atomic<size_t> allocated_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace cellm::cpu
