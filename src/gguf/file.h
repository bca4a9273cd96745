#pragma once
// A GGUF file (v2 or v3) read over a memory map: header, metadata, tensor infos, data.
// Parsing checks every count, length, offset and size against the file before using it, so
// any input - truncated, bit-flipped, hostile - is refused with an error naming the field and
// byte offset, never a crash or an out-of-bounds read.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "gguf/value.h"

namespace cellm::gguf {

inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] varies fastest (ggml's ne order)
  DType type = DType::F32;
  uint64_t offset = 0;        // from the start of the data section
  uint64_t bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t elements() const;
  int64_t rows() const { return dims.empty() ? 1 : elements() / dims[0]; }
};

class File {
 public:
  // Maps and parses the file at path.
  static std::unique_ptr<File> open(const std::string& path);
  // Parses bytes the caller keeps alive (tests, fuzzing); `name` appears in errors.
  static std::unique_ptr<File> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }

  // Metadata in file order, and lookups. The typed getters accept any stored type that
  // converts without loss and throw NotFound / Format errors naming the key otherwise.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  uint64_t get_uint(const std::string& key) const;
  std::optional<uint64_t> get_uint_or(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  std::optional<double> get_float_or(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::optional<bool> get_bool_or(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::string* find_string(const std::string& key) const;
  const Array& get_array(const std::string& key) const;
  const std::vector<std::string>& get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const TensorInfo& tensor(const std::string& name) const;  // NotFound naming the tensor
  uint64_t tensor_bytes() const;  // sum over tensors

 private:
  File() = default;
  void parse_all();

  std::unique_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace cellm::gguf
