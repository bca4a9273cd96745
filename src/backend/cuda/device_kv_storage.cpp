#include "backend/cuda/device_kv_storage.h"

#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace cellm::cuda {

const char* kv_growth_name(KvGrowth growth) { return growth == KvGrowth::Vmm ? "vmm" : "copy"; }

KvGrowth kv_growth_from_env(bool vmm_supported) {
  const char* env = std::getenv("CELLM_KV_GROWTH");
  const std::string value = env ? env : "";
  if (value.empty()) return vmm_supported ? KvGrowth::Vmm : KvGrowth::Copy;
  if (value == "copy") return KvGrowth::Copy;
  if (value == "vmm") {
    if (!vmm_supported)
      fail(ErrorCode::Unsupported, "CELLM_KV_GROWTH=vmm, but this GPU does not support virtual memory management");
    return KvGrowth::Vmm;
  }
  fail(ErrorCode::InvalidArgument, "CELLM_KV_GROWTH='", value, "' (expected copy or vmm)");
}

DeviceKvStorage::DeviceKvStorage(size_t bytes_per_row, cudaStream_t stream, DeviceMemory& memory)
    : bytes_per_row_(bytes_per_row), stream_(stream), memory_(memory) {
  if (bytes_per_row == 0) fail(ErrorCode::InvalidArgument, "kv device storage: bytes_per_row is 0");
}

size_t DeviceKvStorage::bytes_for(int64_t rows_wanted) const {
  if (rows_wanted <= rows_)
    fail(ErrorCode::InvalidArgument, "kv device storage: grow to ", rows_wanted, " rows, already ", rows_);
  const size_t bytes = static_cast<size_t>(rows_wanted) * bytes_per_row_;
  if (bytes / bytes_per_row_ != static_cast<size_t>(rows_wanted))
    fail(ErrorCode::OutOfMemory, "kv device storage: ", rows_wanted, " rows overflow the address space");
  return bytes;
}

void DeviceKvStorage::commit(int64_t rows, bool moved) {
  rows_ = rows;
  last_growth_moved_ = moved;
  if (moved) ++epoch_;
}

std::unique_ptr<DeviceKvStorage> create_device_kv_storage(KvGrowth growth, size_t bytes_per_row, cudaStream_t stream,
                                                          DeviceMemory& memory) {
  if (growth == KvGrowth::Vmm) return create_vmm_storage(bytes_per_row, stream, memory);
  return create_copy_growth_storage(bytes_per_row, stream, memory);
}

void DeviceKvStorage::copy_rows(std::span<const kv::RowCopy> copies) {
  char* base_bytes = static_cast<char*>(base());
  for (const kv::RowCopy& c : copies) {
    if (c.from < 0 || c.from >= rows_ || c.to < 0 || c.to >= rows_)
      fail(ErrorCode::Internal, "kv device storage: row copy ", c.from, " -> ", c.to, " outside ", rows_, " rows");
    check(cudaMemcpyAsync(base_bytes + static_cast<size_t>(c.to) * bytes_per_row_,
                          base_bytes + static_cast<size_t>(c.from) * bytes_per_row_, bytes_per_row_,
                          cudaMemcpyDeviceToDevice, stream_),
          "kv row copy");
  }
}

}  // namespace cellm::cuda
