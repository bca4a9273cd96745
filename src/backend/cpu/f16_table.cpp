#include "backend/cpu/f16_table.h"

#include <vector>

#include "core/half.h"

namespace cellm::cpu {
namespace {

const float* build_table() {
  static std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_fp32(static_cast<uint16_t>(i));
    return t;
  }();
  return table.data();
}

}  // namespace

const float* const kF16ToF32 = build_table();

}  // namespace cellm::cpu
