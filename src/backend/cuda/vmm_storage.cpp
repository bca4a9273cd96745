// In-place KV growth with CUDA virtual memory management: one virtual range reserved at the
// first growth (as large as the device's memory), physical memory created and mapped behind
// it in whole granules as rows grow. One physical allocation per growth, so a pool that grew
// k times holds k mappings.
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_kv_storage.h"
#include "backend/cuda/driver_api.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

size_t round_up(size_t n, size_t granule) { return (n + granule - 1) / granule * granule; }

class VmmStorage final : public DeviceKvStorage {
 public:
  VmmStorage(size_t bytes_per_row, cudaStream_t stream, DeviceMemory& memory)
      : DeviceKvStorage(bytes_per_row, stream, memory), api_(driver_api()) {
    if (!api_.complete) fail(ErrorCode::Unsupported, "the CUDA driver lacks the virtual memory management API");
    use_device(memory.device());
    check(cudaFree(nullptr), "CUDA context");  // makes the primary context current for the driver API
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = memory.device();
    access_.location = prop_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(api_.mem_get_allocation_granularity(&granule_, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity");
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    reserve_bytes_ = round_up(total_bytes, granule_);
  }

  ~VmmStorage() override {
    (void)cudaStreamSynchronize(stream_);  // kernels may still read the pool
    for (const Mapping& m : mappings_) {
      (void)api_.mem_unmap(va_ + m.offset, m.bytes);
      (void)api_.mem_release(m.handle);
      memory_.remove(m.bytes);
    }
    if (va_ != 0) (void)api_.mem_address_free(va_, reserve_bytes_);
  }

  void* base() const override { return rows_ == 0 ? nullptr : reinterpret_cast<void*>(va_); }
  KvGrowth growth_mode() const override { return KvGrowth::Vmm; }

  void grow(int64_t rows_wanted) override {
    const size_t bytes = bytes_for(rows_wanted);
    phase(kv::GrowthPhase::BeforeAllocate);
    const size_t needed = round_up(bytes, granule_);
    if (needed > reserve_bytes_)
      fail(ErrorCode::OutOfMemory, "kv device storage: ", bytes, " bytes exceed the ", reserve_bytes_,
           " bytes of virtual address space reserved for the pool");
    if (va_ == 0) check(api_.mem_address_reserve(&va_, reserve_bytes_, granule_, 0, 0), "cuMemAddressReserve");
    if (needed > mapped_) map_more(needed - mapped_);
    commit(rows_wanted, rows_ == 0);  // only the first allocation changes base()
  }

 private:
  struct Mapping {
    CUmemGenericAllocationHandle handle;
    size_t offset;
    size_t bytes;
  };

  // Maps `bytes` more at the end of the mapped range; on any failure undoes what it did.
  void map_more(size_t bytes) {
    CUmemGenericAllocationHandle handle{};
    check(api_.mem_create(&handle, bytes, &prop_, 0), "cuMemCreate (KV pool growth)");
    bool mapped = false;
    try {
      phase(kv::GrowthPhase::AfterAllocate);
      check(api_.mem_map(va_ + mapped_, bytes, 0, handle, 0), "cuMemMap (KV pool growth)");
      mapped = true;
      check(api_.mem_set_access(va_ + mapped_, bytes, &access_, 1), "cuMemSetAccess (KV pool growth)");
      phase(kv::GrowthPhase::AfterCopy);
    } catch (...) {
      if (mapped) (void)api_.mem_unmap(va_ + mapped_, bytes);
      (void)api_.mem_release(handle);
      throw;
    }
    mappings_.push_back({handle, mapped_, bytes});
    mapped_ += bytes;
    memory_.add(bytes);
  }

  const DriverApi& api_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  size_t granule_ = 0;
  size_t reserve_bytes_ = 0;
  CUdeviceptr va_ = 0;
  size_t mapped_ = 0;
  std::vector<Mapping> mappings_;
};

}  // namespace

std::unique_ptr<DeviceKvStorage> create_vmm_storage(size_t bytes_per_row, cudaStream_t stream, DeviceMemory& memory) {
  return std::make_unique<VmmStorage>(bytes_per_row, stream, memory);
}

}  // namespace cellm::cuda
