#pragma once
// Writes GGUF v3 files: metadata in insertion order, tensors aligned to general.alignment.
// Used by tests (small synthetic models, corrupt variants) and `cellm mkmodel`.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gguf/value.h"

namespace cellm::gguf {

class Writer {
 public:
  void set(const std::string& key, Value value);  // replaces an earlier value of the key
  void set_u32(const std::string& key, uint32_t v) { set(key, Value::u32(v)); }
  void set_f32(const std::string& key, float v) { set(key, Value::f32(v)); }
  void set_bool(const std::string& key, bool v) { set(key, Value::boolean(v)); }
  void set_string(const std::string& key, std::string v) { set(key, Value::string(std::move(v))); }
  void set_strings(const std::string& key, std::vector<std::string> v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);

  // Adds a tensor whose bytes are produced on demand by `fill` (so multi-gigabyte models can
  // be written without holding them in memory). dims[0] varies fastest.
  using Fill = std::function<void(uint8_t* out, uint64_t bytes)>;
  void add_tensor(const std::string& name, std::vector<int64_t> dims, DType type, Fill fill);
  void add_tensor(const std::string& name, std::vector<int64_t> dims, DType type, std::vector<uint8_t> bytes);

  // Serialises to memory / to a file (written to path.tmp, then renamed: no partial file).
  std::vector<uint8_t> to_bytes() const;
  // `progress(done, total)` is called after each tensor (bytes of the file).
  void write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress = {}) const;
  uint64_t file_size() const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    uint64_t bytes;
    Fill fill;
  };
  uint32_t alignment() const;
  void write_to(const std::function<void(const void*, size_t)>& sink, bool with_data,
                const std::function<void()>& after_tensor = {}) const;

  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace cellm::gguf
