#pragma once
// A read-only memory mapping of a whole file. Model weights are used straight from the map,
// so a process loads them once however many sessions it serves.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cellm {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Io / NotFound naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cellm
