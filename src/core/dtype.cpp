#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"

namespace cellm {
namespace {

constexpr std::array kTypes = {
    DTypeInfo{DType::F32, "f32", 1, 4, true},
    DTypeInfo{DType::F16, "f16", 1, 2, true},
    DTypeInfo{DType::Q4_0, "q4_0", 32, 18, true},
    DTypeInfo{DType::Q4_1, "q4_1", 32, 20, true},
    DTypeInfo{DType::Q5_0, "q5_0", 32, 22, true},
    DTypeInfo{DType::Q5_1, "q5_1", 32, 24, true},
    DTypeInfo{DType::Q8_0, "q8_0", 32, 34, true},
    DTypeInfo{DType::Q8_1, "q8_1", 32, 36, false},
    DTypeInfo{DType::Q2_K, "q2_K", 256, 84, false},
    DTypeInfo{DType::Q3_K, "q3_K", 256, 110, false},
    DTypeInfo{DType::Q4_K, "q4_K", 256, 144, true},
    DTypeInfo{DType::Q5_K, "q5_K", 256, 176, true},
    DTypeInfo{DType::Q6_K, "q6_K", 256, 210, true},
    DTypeInfo{DType::Q8_K, "q8_K", 256, 292, false},
    DTypeInfo{DType::I8, "i8", 1, 1, false},
    DTypeInfo{DType::I16, "i16", 1, 2, false},
    DTypeInfo{DType::I32, "i32", 1, 4, false},
    DTypeInfo{DType::I64, "i64", 1, 8, false},
    DTypeInfo{DType::F64, "f64", 1, 8, false},
    DTypeInfo{DType::BF16, "bf16", 1, 2, true},
};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t type_id) {
  for (const auto& info : kTypes)
    if (static_cast<uint32_t>(info.type) == type_id) return info;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType type) {
  for (const auto& info : kTypes)
    if (info.type == type) return info;
  fail(ErrorCode::Internal, "no layout for dtype id ", static_cast<uint32_t>(type));
}

std::string_view dtype_name(DType type) { return dtype_info(type).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kTypes)
    if (iequal(info.name, name)) return info.type;
  return std::nullopt;
}

size_t row_bytes(DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  if (n < 0 || n % info.block_size != 0)
    fail(ErrorCode::InvalidArgument, "a row of ", n, " ", info.name, " elements is not a whole number of ",
         info.block_size, "-element blocks");
  return static_cast<size_t>(n / info.block_size) * info.block_bytes;
}

}  // namespace cellm
