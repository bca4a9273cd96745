#include "kv/host_storage.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "core/error.h"

namespace cellm::kv {

namespace {

// Pools of 2 MiB and more are aligned to 2 MiB and offered to the kernel as huge pages: a
// layer's K or V of consecutive cells lie one cell row (every layer's K and V) apart, so an
// attention walk over 4 KiB pages would touch a new page, and miss the TLB, at every cell.
constexpr size_t kHugePage = size_t{2} << 20;

size_t alignment_for(size_t bytes) { return bytes >= kHugePage ? kHugePage : HostStorage::kAlignment; }

struct AlignedFree {
  size_t alignment = HostStorage::kAlignment;
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(alignment)); }
};
using AlignedBlock = std::unique_ptr<std::byte[], AlignedFree>;

AlignedBlock allocate_block(size_t bytes) {
  const size_t alignment = alignment_for(bytes);
  auto* p = static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(alignment), std::nothrow));
  if (p == nullptr) fail(ErrorCode::OutOfMemory, "kv host storage: cannot allocate ", bytes, " bytes");
#if defined(MADV_HUGEPAGE)
  if (alignment == kHugePage) ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint: ignored if off
#endif
  return AlignedBlock(p, AlignedFree{alignment});
}

}  // namespace

HostStorage::HostStorage(size_t bytes_per_row) : bytes_per_row_(bytes_per_row) {
  if (bytes_per_row == 0) fail(ErrorCode::InvalidArgument, "kv host storage: bytes_per_row is 0");
}

HostStorage::~HostStorage() { AlignedFree{alignment_for(allocated_bytes())}(data_); }

void HostStorage::grow(int64_t rows_wanted) {
  if (rows_wanted <= rows_) {
    fail(ErrorCode::InvalidArgument, "kv host storage: grow to ", rows_wanted, " rows, already ", rows_);
  }
  const size_t new_bytes = static_cast<size_t>(rows_wanted) * bytes_per_row_;
  if (new_bytes / bytes_per_row_ != static_cast<size_t>(rows_wanted)) {
    fail(ErrorCode::OutOfMemory, "kv host storage: ", rows_wanted, " rows overflow the address space");
  }
  if (hook_) hook_(GrowthPhase::BeforeAllocate);
  AlignedBlock block = allocate_block(new_bytes);  // freed on any throw below
  if (hook_) hook_(GrowthPhase::AfterAllocate);
  if (rows_ > 0) std::memcpy(block.get(), data_, allocated_bytes());
  if (hook_) hook_(GrowthPhase::AfterCopy);
  // Commit point: nothing below throws.
  AlignedFree{alignment_for(allocated_bytes())}(data_);  // rows_ still the old count
  data_ = block.release();
  rows_ = rows_wanted;
  ++epoch_;
  last_growth_moved_ = true;
}

void HostStorage::copy_rows(std::span<const RowCopy> copies) {
  for (const RowCopy& c : copies) {
    if (c.from < 0 || c.from >= rows_ || c.to < 0 || c.to >= rows_) {
      fail(ErrorCode::Internal, "kv host storage: row copy ", c.from, " -> ", c.to, " outside ", rows_, " rows");
    }
    std::memcpy(row(c.to), row(c.from), bytes_per_row_);
  }
}

std::byte* HostStorage::row(int64_t r) const { return data_ + static_cast<size_t>(r) * bytes_per_row_; }

}  // namespace cellm::kv
