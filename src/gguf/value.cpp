#include "gguf/value.h"

namespace cellm::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8: return "uint8";
    case ValueType::I8: return "int8";
    case ValueType::U16: return "uint16";
    case ValueType::I16: return "int16";
    case ValueType::U32: return "uint32";
    case ValueType::I32: return "int32";
    case ValueType::F32: return "float32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::U64: return "uint64";
    case ValueType::I64: return "int64";
    case ValueType::F64: return "float64";
  }
  return "unknown";
}

bool is_valid_value_type(uint32_t raw) { return raw <= static_cast<uint32_t>(ValueType::F64); }

bool is_integer(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

bool is_float(ValueType type) { return type == ValueType::F32 || type == ValueType::F64; }

size_t scalar_bytes(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::String: case ValueType::Array: return 0;
  }
  return 0;
}

Value Value::array(Array a) { return {ValueType::Array, std::make_shared<Array>(std::move(a))}; }

size_t Array::size() const {
  switch (elem_type) {
    case ValueType::String: return strings.size();
    case ValueType::Array: return arrays.size();
    case ValueType::F32: case ValueType::F64: return floats.size();
    case ValueType::U64: return uints.size();
    default: return ints.size();
  }
}

}  // namespace cellm::gguf
