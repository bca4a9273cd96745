#pragma once
// A bounds-checked little-endian reader over a byte span. Every read checks the remaining
// length first, and every error names the field being read and its byte offset.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"

namespace cellm::gguf {

class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return bytes_.size() - offset_; }

  template <typename T>
  T read(std::string_view field) {
    require(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));  // files are little-endian, as is every target
    offset_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view field) {
    const uint64_t at = offset_;
    const uint64_t length = read<uint64_t>(field);
    if (length > remaining()) {
      offset_ = at;
      error(field, "string length ", length, " runs past the end of the file (", remaining() - 8, " bytes left)");
    }
    std::string value(reinterpret_cast<const char*>(bytes_.data() + offset_), length);
    offset_ += length;
    return value;
  }

  void require(uint64_t n, std::string_view field) const {
    if (n > remaining()) error(field, "needs ", n, " bytes but the file ends after ", remaining());
  }

  template <typename... Args>
  [[noreturn]] void error(std::string_view field, Args&&... args) const {
    error_at(offset_, field, std::forward<Args>(args)...);
  }

  template <typename... Args>
  [[noreturn]] void error_at(uint64_t at, std::string_view field, Args&&... args) const {
    fail(ErrorCode::Format, "GGUF '", source_, "': ", field, " at byte ", at, ": ", std::forward<Args>(args)...);
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& source_;
  uint64_t offset_ = 0;
};

}  // namespace cellm::gguf
