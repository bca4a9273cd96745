#include "backend/cpu/matmul_scratch.h"

#include "core/error.h"

namespace cellm::cpu {

std::byte* AlignedBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_) return data_.get();
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
  if (p == nullptr) fail(ErrorCode::OutOfMemory, "matmul scratch: cannot allocate ", rounded, " bytes");
  data_.reset(p);
  capacity_ = rounded;
  return p;
}

MatmulScratch::MatmulScratch() : buffers_(std::make_unique<Buffers>()) {}
MatmulScratch::~MatmulScratch() = default;

}  // namespace cellm::cpu
