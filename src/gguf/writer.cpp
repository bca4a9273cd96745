#include "gguf/writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "gguf/file.h"

namespace cellm::gguf {
namespace {

class Sink {
 public:
  explicit Sink(const std::function<void(const void*, size_t)>& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    out_(&v, sizeof v);
    written_ += sizeof v;
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_(s.data(), s.size());
    written_ += s.size();
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[64] = {};
    while (written_ % alignment != 0) {
      const uint64_t n = std::min<uint64_t>(sizeof zeros, alignment - written_ % alignment);
      out_(zeros, n);
      written_ += n;
    }
  }
  void raw(const void* p, size_t n) {
    out_(p, n);
    written_ += n;
  }
  uint64_t written() const { return written_; }

 private:
  const std::function<void(const void*, size_t)>& out_;
  uint64_t written_ = 0;
};

void put_scalar(Sink& s, ValueType type, const Value& v);

void put_array(Sink& s, const Array& a) {
  s.put<uint32_t>(static_cast<uint32_t>(a.elem_type));
  s.put<uint64_t>(a.size());
  switch (a.elem_type) {
    case ValueType::String:
      for (const auto& x : a.strings) s.put_string(x);
      break;
    case ValueType::Array:
      for (const auto& x : a.arrays) put_array(s, x);
      break;
    case ValueType::F32:
      for (double x : a.floats) s.put<float>(static_cast<float>(x));
      break;
    case ValueType::F64:
      for (double x : a.floats) s.put<double>(x);
      break;
    case ValueType::U64:
      for (uint64_t x : a.uints) s.put<uint64_t>(x);
      break;
    default:
      for (int64_t x : a.ints) {
        switch (a.elem_type) {
          case ValueType::U8: s.put<uint8_t>(static_cast<uint8_t>(x)); break;
          case ValueType::I8: s.put<int8_t>(static_cast<int8_t>(x)); break;
          case ValueType::Bool: s.put<uint8_t>(x != 0); break;
          case ValueType::U16: s.put<uint16_t>(static_cast<uint16_t>(x)); break;
          case ValueType::I16: s.put<int16_t>(static_cast<int16_t>(x)); break;
          case ValueType::U32: s.put<uint32_t>(static_cast<uint32_t>(x)); break;
          case ValueType::I32: s.put<int32_t>(static_cast<int32_t>(x)); break;
          default: s.put<int64_t>(x); break;
        }
      }
      break;
  }
}

void put_scalar(Sink& s, ValueType type, const Value& v) {
  auto as_u = [&] {
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
    return static_cast<uint64_t>(std::get<int64_t>(v.data));
  };
  switch (type) {
    case ValueType::U8: s.put<uint8_t>(static_cast<uint8_t>(as_u())); break;
    case ValueType::I8: s.put<int8_t>(static_cast<int8_t>(as_u())); break;
    case ValueType::U16: s.put<uint16_t>(static_cast<uint16_t>(as_u())); break;
    case ValueType::I16: s.put<int16_t>(static_cast<int16_t>(as_u())); break;
    case ValueType::U32: s.put<uint32_t>(static_cast<uint32_t>(as_u())); break;
    case ValueType::I32: s.put<int32_t>(static_cast<int32_t>(as_u())); break;
    case ValueType::U64: s.put<uint64_t>(as_u()); break;
    case ValueType::I64: s.put<int64_t>(static_cast<int64_t>(as_u())); break;
    case ValueType::F32: s.put<float>(static_cast<float>(std::get<double>(v.data))); break;
    case ValueType::F64: s.put<double>(std::get<double>(v.data)); break;
    case ValueType::Bool: s.put<uint8_t>(std::get<bool>(v.data) ? 1 : 0); break;
    case ValueType::String: s.put_string(std::get<std::string>(v.data)); break;
    case ValueType::Array: put_array(s, v.as_array()); break;
  }
}

}  // namespace

void Writer::set(const std::string& key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void Writer::set_strings(const std::string& key, std::vector<std::string> v) {
  Array a;
  a.elem_type = ValueType::String;
  a.strings = std::move(v);
  set(key, Value::array(std::move(a)));
}

void Writer::set_f32s(const std::string& key, const std::vector<float>& v) {
  Array a;
  a.elem_type = ValueType::F32;
  a.floats.assign(v.begin(), v.end());
  set(key, Value::array(std::move(a)));
}

void Writer::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  Array a;
  a.elem_type = ValueType::I32;
  a.ints.assign(v.begin(), v.end());
  set(key, Value::array(std::move(a)));
}

void Writer::add_tensor(const std::string& name, std::vector<int64_t> dims, DType type, Fill fill) {
  if (dims.empty() || dims.size() > kMaxDims) fail(ErrorCode::InvalidArgument, "tensor '", name, "' needs 1..4 dims");
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d <= 0) fail(ErrorCode::InvalidArgument, "tensor '", name, "' has a dimension of ", d);
    elements *= d;
  }
  const uint64_t bytes = row_bytes(type, dims[0]) * static_cast<uint64_t>(elements / dims[0]);
  for (const auto& t : tensors_)
    if (t.name == name) fail(ErrorCode::InvalidArgument, "tensor '", name, "' added twice");
  tensors_.push_back({name, std::move(dims), type, bytes, std::move(fill)});
}

void Writer::add_tensor(const std::string& name, std::vector<int64_t> dims, DType type, std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, std::move(dims), type, [shared, name](uint8_t* out, uint64_t n) {
    if (n != shared->size())
      fail(ErrorCode::InvalidArgument, "tensor '", name, "' has ", shared->size(), " bytes, its shape needs ", n);
    std::memcpy(out, shared->data(), n);
  });
}

uint32_t Writer::alignment() const {
  for (const auto& [k, v] : metadata_) {
    if (k != "general.alignment") continue;
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<uint32_t>(*u);
    if (const auto* s = std::get_if<int64_t>(&v.data)) return static_cast<uint32_t>(*s);
  }
  return kDefaultAlignment;
}

void Writer::write_to(const std::function<void(const void*, size_t)>& out, bool with_data,
                      const std::function<void()>& after_tensor) const {
  const uint64_t align = alignment();
  Sink s(out);
  s.put<uint32_t>(0x46554747);
  s.put<uint32_t>(3);
  s.put<uint64_t>(tensors_.size());
  s.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    s.put_string(key);
    s.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_scalar(s, value.type, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    s.put_string(t.name);
    s.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) s.put<uint64_t>(static_cast<uint64_t>(d));
    s.put<uint32_t>(static_cast<uint32_t>(t.type));
    s.put<uint64_t>(offset);
    offset += (t.bytes + align - 1) / align * align;
  }
  s.pad_to(align);
  if (!with_data) return;
  std::vector<uint8_t> buffer;
  for (const auto& t : tensors_) {
    buffer.resize(t.bytes);
    t.fill(buffer.data(), t.bytes);
    s.raw(buffer.data(), buffer.size());
    s.pad_to(align);
    if (after_tensor) after_tensor();
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> bytes;
  write_to([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }, /*with_data=*/true);
  return bytes;
}

uint64_t Writer::file_size() const {
  uint64_t header = 0;
  write_to([&](const void*, size_t n) { header += n; }, /*with_data=*/false);
  uint64_t data = 0;
  const uint64_t align = alignment();
  for (const auto& t : tensors_) data += (t.bytes + align - 1) / align * align;
  return header + data;
}

void Writer::write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
  const uint64_t total = progress ? file_size() : 0;
  uint64_t written = 0;
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail(ErrorCode::Io, "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    write_to([&](const void* p, size_t n) {
      if (std::fwrite(p, 1, n, f) != n) fail(ErrorCode::Io, "writing '", tmp, "' failed: ", std::strerror(errno));
      written += n;
    }, /*with_data=*/true, [&] {
      if (progress) progress(written, total);
    });
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    fail(ErrorCode::Io, "closing '", tmp, "' failed: ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(ErrorCode::Io, "cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
}

}  // namespace cellm::gguf
