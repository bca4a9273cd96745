#include "gguf/file.h"

#include <limits>

#include "gguf/cursor.h"

namespace cellm::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxArrayDepth = 8;

Array read_array(Cursor& in, const std::string& field, int depth);

Value read_scalar(Cursor& in, ValueType type, const std::string& field) {
  switch (type) {
    case ValueType::U8: return Value::u8(in.read<uint8_t>(field));
    case ValueType::I8: return Value::i8(in.read<int8_t>(field));
    case ValueType::U16: return Value::u16(in.read<uint16_t>(field));
    case ValueType::I16: return Value::i16(in.read<int16_t>(field));
    case ValueType::U32: return Value::u32(in.read<uint32_t>(field));
    case ValueType::I32: return Value::i32(in.read<int32_t>(field));
    case ValueType::U64: return Value::u64(in.read<uint64_t>(field));
    case ValueType::I64: return Value::i64(in.read<int64_t>(field));
    case ValueType::F32: return Value::f32(in.read<float>(field));
    case ValueType::F64: return Value::f64(in.read<double>(field));
    case ValueType::Bool: {
      const uint64_t at = in.offset();
      const uint8_t b = in.read<uint8_t>(field);
      if (b > 1) in.error_at(at, field, "bool value ", int{b}, " is neither 0 nor 1");
      return Value::boolean(b != 0);
    }
    case ValueType::String: return Value::string(in.read_string(field));
    case ValueType::Array: return Value::array(read_array(in, field, 0));
  }
  in.error(field, "unknown value type");
}

ValueType read_value_type(Cursor& in, const std::string& field) {
  const uint64_t at = in.offset();
  const uint32_t raw = in.read<uint32_t>(field + " type");
  if (!is_valid_value_type(raw)) in.error_at(at, field + " type", "unknown value type ", raw);
  return static_cast<ValueType>(raw);
}

Array read_array(Cursor& in, const std::string& field, int depth) {
  if (depth >= kMaxArrayDepth) in.error(field, "arrays nested deeper than ", kMaxArrayDepth);
  Array array;
  array.elem_type = read_value_type(in, field + " element");
  const uint64_t at = in.offset();
  const uint64_t count = in.read<uint64_t>(field + " count");
  // The smallest encoding of one element bounds how many can fit in what is left, so a
  // corrupt count cannot make us reserve gigabytes.
  const uint64_t min_bytes = array.elem_type == ValueType::String  ? 8
                             : array.elem_type == ValueType::Array ? 12
                                                                   : scalar_bytes(array.elem_type);
  if (count > in.remaining() / min_bytes)
    in.error_at(at, field + " count", "array of ", count, " ", value_type_name(array.elem_type),
                " elements cannot fit in the ", in.remaining(), " bytes left");
  switch (array.elem_type) {
    case ValueType::String:
      array.strings.reserve(count);
      for (uint64_t i = 0; i < count; ++i) array.strings.push_back(in.read_string(field));
      break;
    case ValueType::Array:
      array.arrays.reserve(count);
      for (uint64_t i = 0; i < count; ++i) array.arrays.push_back(read_array(in, field, depth + 1));
      break;
    case ValueType::F32:
    case ValueType::F64:
      array.floats.reserve(count);
      for (uint64_t i = 0; i < count; ++i)
        array.floats.push_back(std::get<double>(read_scalar(in, array.elem_type, field).data));
      break;
    case ValueType::U64:
      array.uints.reserve(count);
      for (uint64_t i = 0; i < count; ++i) array.uints.push_back(in.read<uint64_t>(field));
      break;
    default:
      array.ints.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        const Value v = read_scalar(in, array.elem_type, field);
        if (const auto* s = std::get_if<int64_t>(&v.data)) array.ints.push_back(*s);
        else if (const auto* u = std::get_if<uint64_t>(&v.data)) array.ints.push_back(static_cast<int64_t>(*u));
        else array.ints.push_back(std::get<bool>(v.data) ? 1 : 0);
      }
      break;
  }
  return array;
}

}  // namespace

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::unique_ptr<File> File::open(const std::string& path) {
  auto mapping = std::make_unique<MappedFile>(path);
  std::unique_ptr<File> file(new File());
  file->bytes_ = mapping->bytes();
  file->mapping_ = std::move(mapping);
  file->name_ = path;
  file->parse_all();
  return file;
}

std::unique_ptr<File> File::parse(std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<File> file(new File());
  file->bytes_ = bytes;
  file->name_ = name;
  file->parse_all();
  return file;
}

void File::parse_all() {
  Cursor in(bytes_, name_);
  const uint32_t magic = in.read<uint32_t>("magic");
  if (magic != kMagic) in.error_at(0, "magic", "not a GGUF file (expected the bytes 'GGUF')");
  version_ = in.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) in.error_at(4, "version", "version ", version_, " is not supported (2 or 3)");
  const uint64_t tensor_count_at = in.offset();
  const uint64_t tensor_count = in.read<uint64_t>("tensor count");
  const uint64_t kv_count_at = in.offset();
  const uint64_t kv_count = in.read<uint64_t>("metadata count");
  // A key-value pair takes at least 12 bytes (empty key + type) and a tensor info at least 24.
  if (kv_count > in.remaining() / 12)
    in.error_at(kv_count_at, "metadata count", kv_count, " entries cannot fit in a file of ", bytes_.size(), " bytes");
  if (tensor_count > in.remaining() / 24)
    in.error_at(tensor_count_at, "tensor count", tensor_count, " tensors cannot fit in a file of ", bytes_.size(),
                " bytes");

  metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t at = in.offset();
    std::string key = in.read_string("metadata key #" + std::to_string(i));
    const std::string field = "metadata '" + key + "'";
    if (metadata_index_.count(key)) in.error_at(at, field, "key appears twice");
    const ValueType type = read_value_type(in, field);
    Value value = read_scalar(in, type, field);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const Value* v = find("general.alignment")) {
    if (!is_integer(v->type)) fail(ErrorCode::Format, "GGUF '", name_, "': general.alignment is not an integer");
    const uint64_t a = get_uint("general.alignment");
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 20))
      fail(ErrorCode::Format, "GGUF '", name_, "': general.alignment ", a, " is not a power of two up to 1 MiB");
    alignment_ = static_cast<uint32_t>(a);
  }

  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo t;
    const uint64_t at = in.offset();
    t.name = in.read_string("tensor #" + std::to_string(i) + " name");
    const std::string field = "tensor '" + t.name + "'";
    if (tensor_index_.count(t.name)) in.error_at(at, field, "name appears twice");
    const uint64_t dims_at = in.offset();
    const uint32_t n_dims = in.read<uint32_t>(field + " dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) in.error_at(dims_at, field + " dimension count", n_dims, " is not in 1..4");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = in.offset();
      const uint64_t dim = in.read<uint64_t>(field + " dimension");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)
        in.error_at(dim_at, field + " dimension " + std::to_string(d), "size ", dim,
                    " is zero or makes the element count overflow");
      elements *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t type_at = in.offset();
    const uint32_t type_id = in.read<uint32_t>(field + " type");
    const auto info = dtype_info(type_id);
    if (!info) in.error_at(type_at, field + " type", "unknown tensor type ", type_id);
    t.type = info->type;
    if (t.dims[0] % info->block_size != 0)
      in.error_at(dims_at, field + " dimension 0", "row of ", t.dims[0], " elements is not a multiple of the ",
                  info->name, " block size ", info->block_size);
    const uint64_t blocks = elements / info->block_size;
    if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes)
      in.error_at(dims_at, field + " dimensions", "byte size overflows");
    t.bytes = blocks * info->block_bytes;
    const uint64_t offset_at = in.offset();
    t.offset = in.read<uint64_t>(field + " offset");
    if (t.offset % alignment_ != 0)
      in.error_at(offset_at, field + " offset", "data offset ", t.offset, " is not aligned to ", alignment_);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  const uint64_t end_of_infos = in.offset();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > bytes_.size())
    in.error_at(end_of_infos, "data section", "starts at ", data_offset_, " past the end of the file (",
                bytes_.size(), " bytes)");
  const uint64_t data_bytes = bytes_.size() - std::min<uint64_t>(data_offset_, bytes_.size());
  for (TensorInfo& t : tensors_) {
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset)
      fail(ErrorCode::Format, "GGUF '", name_, "': tensor '", t.name, "' data [", data_offset_ + t.offset, ", ",
           data_offset_ + t.offset + t.bytes, ") lies outside the file (", bytes_.size(), " bytes)");
    t.data = bytes_.data() + data_offset_ + t.offset;
  }
}

const Value* File::find(const std::string& key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

[[noreturn]] void wrong_type(const std::string& file, const std::string& key, const Value& v, const char* wanted) {
  fail(ErrorCode::Format, "GGUF '", file, "': metadata '", key, "' is ", value_type_name(v.type), ", expected ", wanted);
}

}  // namespace


uint64_t File::get_uint(const std::string& key) const {
  if (auto v = get_uint_or(key)) return *v;
  fail(ErrorCode::NotFound, "GGUF '", name_, "': metadata '", key, "' is missing");
}

std::optional<uint64_t> File::get_uint_or(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v->data)) return *u;
  if (const auto* s = std::get_if<int64_t>(&v->data); s && *s >= 0) return static_cast<uint64_t>(*s);
  wrong_type(name_, key, *v, "a non-negative integer");
}

int64_t File::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) fail(ErrorCode::NotFound, "GGUF '", name_, "': metadata '", key, "' is missing");
  if (const auto* s = std::get_if<int64_t>(&v->data)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v->data);
      u && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(*u);
  wrong_type(name_, key, *v, "an integer");
}

double File::get_float(const std::string& key) const {
  if (auto v = get_float_or(key)) return *v;
  fail(ErrorCode::NotFound, "GGUF '", name_, "': metadata '", key, "' is missing");
}

std::optional<double> File::get_float_or(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(&v->data)) return *d;
  if (const auto* s = std::get_if<int64_t>(&v->data)) return static_cast<double>(*s);
  if (const auto* u = std::get_if<uint64_t>(&v->data)) return static_cast<double>(*u);
  wrong_type(name_, key, *v, "a number");
}

bool File::get_bool(const std::string& key) const {
  if (auto v = get_bool_or(key)) return *v;
  fail(ErrorCode::NotFound, "GGUF '", name_, "': metadata '", key, "' is missing");
}

std::optional<bool> File::get_bool_or(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  wrong_type(name_, key, *v, "a bool");
}

const std::string* File::find_string(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return nullptr;
  if (const auto* s = std::get_if<std::string>(&v->data)) return s;
  wrong_type(name_, key, *v, "a string");
}

const std::string& File::get_string(const std::string& key) const {
  if (const std::string* s = find_string(key)) return *s;
  fail(ErrorCode::NotFound, "GGUF '", name_, "': metadata '", key, "' is missing");
}

const Array& File::get_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) fail(ErrorCode::NotFound, "GGUF '", name_, "': metadata '", key, "' is missing");
  if (v->type != ValueType::Array) wrong_type(name_, key, *v, "an array");
  return v->as_array();
}

const std::vector<std::string>& File::get_string_array(const std::string& key) const {
  const Array& a = get_array(key);
  if (a.elem_type != ValueType::String)
    fail(ErrorCode::Format, "GGUF '", name_, "': metadata '", key, "' is an array of ", value_type_name(a.elem_type),
         ", expected strings");
  return a.strings;
}

std::vector<float> File::get_float_array(const std::string& key) const {
  const Array& a = get_array(key);
  if (is_float(a.elem_type)) return {a.floats.begin(), a.floats.end()};
  if (is_integer(a.elem_type) && a.elem_type != ValueType::U64) return {a.ints.begin(), a.ints.end()};
  fail(ErrorCode::Format, "GGUF '", name_, "': metadata '", key, "' is an array of ", value_type_name(a.elem_type),
       ", expected numbers");
}

std::vector<int64_t> File::get_int_array(const std::string& key) const {
  const Array& a = get_array(key);
  if (is_integer(a.elem_type) && a.elem_type != ValueType::U64) return a.ints;
  if (a.elem_type == ValueType::Bool) return a.ints;
  fail(ErrorCode::Format, "GGUF '", name_, "': metadata '", key, "' is an array of ", value_type_name(a.elem_type),
       ", expected integers");
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  if (const TensorInfo* t = find_tensor(name)) return *t;
  fail(ErrorCode::NotFound, "GGUF '", name_, "': tensor '", name, "' is missing");
}

uint64_t File::tensor_bytes() const {
  uint64_t total = 0;
  for (const TensorInfo& t : tensors_) total += t.bytes;
  return total;
}

}  // namespace cellm::gguf
