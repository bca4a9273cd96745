#pragma once
// Element types, numbered as GGUF/ggml number them so a tensor's type id maps directly.
// Quantized types store blocks of `block_size` elements in `block_bytes` bytes.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cellm {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct DTypeInfo {
  DType type;
  std::string_view name;  // as ggml spells it: "q4_K", "bf16"
  uint32_t block_size;    // elements per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
  bool weight_format;     // a weight format cellm computes with (DESIGN.md section 2)
};

// Layout of a GGUF type id, or nothing when the id is not a type cellm knows the layout of.
std::optional<DTypeInfo> dtype_info(uint32_t type_id);
const DTypeInfo& dtype_info(DType type);  // for known enumerators; throws Internal otherwise
std::string_view dtype_name(DType type);
// Parses "q4_k", "Q4_K", "bf16", ... (case-insensitive); nothing when unknown.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of n elements; throws InvalidArgument if n is not a multiple of the block.
size_t row_bytes(DType type, int64_t n);

}  // namespace cellm
