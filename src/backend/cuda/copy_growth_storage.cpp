// Copy-growth KV storage: a new block per growth, the old rows copied over on the device.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_kv_storage.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

class CopyGrowthStorage final : public DeviceKvStorage {
 public:
  using DeviceKvStorage::DeviceKvStorage;
  ~CopyGrowthStorage() override {
    if (data_ == nullptr) return;
    try {
      memory_.release(data_);  // cudaFree waits for kernels still using the pool
    } catch (...) {
    }
  }

  void* base() const override { return rows_ == 0 ? nullptr : data_; }
  KvGrowth growth_mode() const override { return KvGrowth::Copy; }

  void grow(int64_t rows_wanted) override {
    const size_t bytes = bytes_for(rows_wanted);
    phase(kv::GrowthPhase::BeforeAllocate);
    void* fresh = memory_.allocate(bytes, "KV pool");
    try {
      phase(kv::GrowthPhase::AfterAllocate);
      if (rows_ > 0) {
        check(cudaMemcpyAsync(fresh, data_, allocated_bytes(), cudaMemcpyDeviceToDevice, stream_), "KV pool copy");
        check(cudaStreamSynchronize(stream_), "KV pool copy");
      }
      phase(kv::GrowthPhase::AfterCopy);
    } catch (...) {
      memory_.release(fresh);
      throw;
    }
    // Commit point: nothing below throws.
    void* old = data_;
    data_ = fresh;
    commit(rows_wanted, true);
    if (old != nullptr) {
      try {
        memory_.release(old);
      } catch (...) {
      }
    }
  }

 private:
  void* data_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceKvStorage> create_copy_growth_storage(size_t bytes_per_row, cudaStream_t stream,
                                                            DeviceMemory& memory) {
  return std::make_unique<CopyGrowthStorage>(bytes_per_row, stream, memory);
}

}  // namespace cellm::cuda
