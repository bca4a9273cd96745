#pragma once
// The CPU backend with a KV pool whose growths can be made to fail (kv::FaultyStorage), as an
// exhausted device would refuse them: lets a runner test exhaust memory without exhausting
// the machine. Everything else is forwarded unchanged (CpuBackend is final, so it is wrapped),
// and the uploads are counted (the copies an executor step makes).
#include "backend/cpu/cpu_backend.h"
#include "kv/faulty_storage.h"

namespace cellm::test {

class FaultyBackend final : public backend::Backend {
 public:
  using TensorRef = backend::TensorRef;
  explicit FaultyBackend(int threads) : cpu_(threads) {}

  // The pool's storage (the executor makes one); null before.
  kv::FaultyStorage* storage() const { return storage_; }

  std::unique_ptr<kv::KvStorage> create_kv_storage(size_t bytes_per_row) override {
    auto s = std::make_unique<kv::FaultyStorage>(cpu_.create_kv_storage(bytes_per_row));
    storage_ = s.get();
    return s;
  }

  std::string name() const override { return cpu_.name(); }
  std::string description() const override { return "faulty " + cpu_.description(); }
  void* allocate(size_t bytes, const char* what) override { return cpu_.allocate(bytes, what); }
  void release(void* p) override { cpu_.release(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    ++uploads;
    cpu_.upload(dst, src, bytes);
  }
  int64_t uploads = 0;
  void download(void* dst, const void* src, size_t bytes) override { cpu_.download(dst, src, bytes); }
  TensorRef place_weight(const TensorRef& w, const std::string& name) override { return cpu_.place_weight(w, name); }
  TensorRef place_stacked_weight(std::span<const TensorRef> parts, const std::string& name) override {
    return cpu_.place_stacked_weight(parts, name);
  }
  backend::MemoryStats memory_stats() const override { return cpu_.memory_stats(); }
  void embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) override {
    cpu_.embed(table, tokens, scale, out);
  }
  void rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) override {
    cpu_.rms_norm(x, weight, group, eps, out);
  }
  void matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) override {
    cpu_.matmul(x, w, bias, out);
  }
  void rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) override {
    cpu_.rope(x, positions, params);
  }
  void kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) override {
    cpu_.kv_store(k, v, dst);
  }
  void attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                 const TensorRef& out) override {
    cpu_.attention(q, kv, positions, scale, out);
  }
  void add(const TensorRef& a, const TensorRef& b, const TensorRef& out) override { cpu_.add(a, b, out); }
  void glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) override {
    cpu_.glu(gate, up, act, out);
  }
  void gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) override {
    cpu_.gather_rows(x, rows, out);
  }
  void argmax_rows(const TensorRef& logits, int32_t* out) override { cpu_.argmax_rows(logits, out); }
  // Off: the backend keeps its threads to itself, as a device backend has none to lend.
  bool lend_host_threads = true;
  ThreadPool* host_threads() override { return lend_host_threads ? cpu_.host_threads() : nullptr; }
  void synchronize() override { cpu_.synchronize(); }

 private:
  cpu::CpuBackend cpu_;
  kv::FaultyStorage* storage_ = nullptr;  // owned by the cache
};

}  // namespace cellm::test
