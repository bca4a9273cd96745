#pragma once
// Many short strings in one buffer, addressed by index. A 262k-token vocabulary loads as two
// allocations instead of 262k, which is what keeps loading Gemma's tokenizer fast.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::tokenizer {

class StringArena {
 public:
  void reserve(size_t strings, size_t bytes) {
    ends_.reserve(strings);
    bytes_.reserve(bytes);
  }
  void push_back(std::string_view s) {
    bytes_.append(s);
    ends_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  size_t size() const { return ends_.size(); }
  std::string_view operator[](size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(bytes_).substr(begin, ends_[i] - begin);
  }

 private:
  std::string bytes_;
  std::vector<uint32_t> ends_;
};

}  // namespace cellm::tokenizer
