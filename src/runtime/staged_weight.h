#pragma once
// A weight assembled on the host from several GGUF tensors (stacked projections), 64-byte
// aligned like the mapped GGUF data the kernels otherwise read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace cellm::runtime {

class StagedWeight {
 public:
  explicit StagedWeight(size_t bytes)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment))) {
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~StagedWeight() { std::free(data_); }
  StagedWeight(const StagedWeight&) = delete;
  StagedWeight& operator=(const StagedWeight&) = delete;

  uint8_t* data() { return data_; }

 private:
  static constexpr size_t kAlignment = 64;
  uint8_t* data_;
};

}  // namespace cellm::runtime
