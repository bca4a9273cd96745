#pragma once
// The buffers behind MatmulScratch: they only grow, so steady-state calls allocate nothing.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/cpu/matmul.h"

namespace cellm::cpu {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  std::byte* reserve(size_t bytes);  // contents are not kept when it grows
  std::byte* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t capacity_ = 0;
};

struct MatmulScratch::Buffers {
  AlignedBuffer activations;
  std::vector<AlignedBuffer> work;  // one per pool thread
};

}  // namespace cellm::cpu
