#pragma once
// GGUF metadata values. Arrays keep their elements in one typed vector (not a vector of
// variants): Gemma's vocabulary alone is three arrays of 262,144 entries.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cellm::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

std::string_view value_type_name(ValueType type);
bool is_valid_value_type(uint32_t raw);
bool is_integer(ValueType type);
bool is_float(ValueType type);
// Bytes of one scalar of this type in a file; 0 for String and Array.
size_t scalar_bytes(ValueType type);

struct Array;

// A scalar or an array. Integers are widened to int64 or uint64 (by signedness), floats to
// double; `type` keeps the type stored in the file so a writer reproduces it.
struct Value {
  ValueType type = ValueType::U32;
  std::variant<int64_t, uint64_t, double, bool, std::string, std::shared_ptr<Array>> data;

  static Value u8(uint8_t v) { return {ValueType::U8, uint64_t{v}}; }
  static Value i8(int8_t v) { return {ValueType::I8, int64_t{v}}; }
  static Value u16(uint16_t v) { return {ValueType::U16, uint64_t{v}}; }
  static Value i16(int16_t v) { return {ValueType::I16, int64_t{v}}; }
  static Value u32(uint32_t v) { return {ValueType::U32, uint64_t{v}}; }
  static Value i32(int32_t v) { return {ValueType::I32, int64_t{v}}; }
  static Value u64(uint64_t v) { return {ValueType::U64, v}; }
  static Value i64(int64_t v) { return {ValueType::I64, v}; }
  static Value f32(float v) { return {ValueType::F32, double{v}}; }
  static Value f64(double v) { return {ValueType::F64, v}; }
  static Value boolean(bool v) { return {ValueType::Bool, v}; }
  static Value string(std::string v) { return {ValueType::String, std::move(v)}; }
  static Value array(Array a);

  const Array& as_array() const { return *std::get<std::shared_ptr<Array>>(data); }
};

// Elements of one type. Exactly one vector is used, picked by elem_type: integers and bools
// in `ints` (unsigned 64-bit in `uints`), floats in `floats`, strings, or nested arrays.
struct Array {
  ValueType elem_type = ValueType::U32;
  std::vector<int64_t> ints;
  std::vector<uint64_t> uints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<Array> arrays;

  size_t size() const;
};

}  // namespace cellm::gguf
