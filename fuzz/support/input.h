#pragma once
// Reads a fuzz input front to back: selector bytes, length-prefixed slices, the rest. Reading
// past the end yields zeros and empty slices, so every input means something.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cellm::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : text_(reinterpret_cast<const char*>(data), size) {}

  bool empty() const { return pos_ >= text_.size(); }
  uint8_t byte() { return empty() ? 0 : static_cast<uint8_t>(text_[pos_++]); }
  std::string_view slice(size_t n) {
    n = std::min(n, text_.size() - pos_);
    const std::string_view s = text_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view rest() { return slice(text_.size() - pos_); }
  std::string_view whole() const { return text_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace cellm::fuzz
