#pragma once
// The KV pool in device memory (kv::KvStorage), in two growth modes:
//  - Copy: cudaMalloc a new block, copy the old rows on the device, free the old block. Every
//    growth moves base() and bumps the binding epoch (bound programs and graphs must rebind).
//  - Vmm: reserve a large virtual range once and map physical memory behind it in whole
//    granules (2 MiB) as rows grow (cuMemCreate + cuMemMap + cuMemSetAccess). base() never
//    moves and the epoch changes only on the first allocation (null -> base).
// Both are transactional: a failed growth leaves base, rows, epoch and contents as they were.
// The default is Vmm where the device supports it; CELLM_KV_GROWTH=copy|vmm forces a mode.
#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "backend/cuda/device_memory.h"
#include "kv/host_storage.h"
#include "kv/storage.h"

namespace cellm::cuda {

enum class KvGrowth { Copy, Vmm };
const char* kv_growth_name(KvGrowth growth);
// The mode from CELLM_KV_GROWTH, else Vmm when supported; throws InvalidArgument for an
// unknown value and Unsupported for vmm on a device without virtual memory management.
KvGrowth kv_growth_from_env(bool vmm_supported);

class DeviceKvStorage : public kv::KvStorage {
 public:
  // Test hook called at each phase of a growth (kv::GrowthPhase; AfterCopy is "after the old
  // rows are in place": copied, or mapped for Vmm); whatever it throws aborts the growth.
  using GrowthHook = std::function<void(kv::GrowthPhase)>;

  DeviceKvStorage(size_t bytes_per_row, cudaStream_t stream, DeviceMemory& memory);

  size_t bytes_per_row() const override { return bytes_per_row_; }
  int64_t rows() const override { return rows_; }
  uint64_t binding_epoch() const override { return epoch_; }
  bool last_growth_moved() const override { return last_growth_moved_; }
  // Row copies on the device, ordered on the backend's stream before any later kernel.
  void copy_rows(std::span<const kv::RowCopy> copies) override;

  void set_growth_hook(GrowthHook hook) { hook_ = std::move(hook); }
  virtual KvGrowth growth_mode() const = 0;

 protected:
  // Bytes for rows_wanted rows, after checking the request (InvalidArgument, OutOfMemory).
  size_t bytes_for(int64_t rows_wanted) const;
  void phase(kv::GrowthPhase p) const {
    if (hook_) hook_(p);
  }
  void commit(int64_t rows, bool moved);

  size_t bytes_per_row_;
  cudaStream_t stream_;
  DeviceMemory& memory_;
  int64_t rows_ = 0;
  uint64_t epoch_ = 0;
  bool last_growth_moved_ = false;
  GrowthHook hook_;
};

std::unique_ptr<DeviceKvStorage> create_device_kv_storage(KvGrowth growth, size_t bytes_per_row, cudaStream_t stream,
                                                          DeviceMemory& memory);
// The two modes (copy_growth_storage.cpp, vmm_storage.cpp).
std::unique_ptr<DeviceKvStorage> create_copy_growth_storage(size_t bytes_per_row, cudaStream_t stream,
                                                            DeviceMemory& memory);
std::unique_ptr<DeviceKvStorage> create_vmm_storage(size_t bytes_per_row, cudaStream_t stream, DeviceMemory& memory);

}  // namespace cellm::cuda
