#pragma once
// Q4_K and Q5_K keep eight 6-bit scales and eight 6-bit mins in 12 bytes:
//   bytes 0..3:  low 6 bits = scale 0..3, top 2 bits = bits 4..5 of scale 4..7
//   bytes 4..7:  low 6 bits = min 0..3,   top 2 bits = bits 4..5 of min 4..7
//   bytes 8..11: low nibble = bits 0..3 of scale 4..7, high nibble = bits 0..3 of min 4..7
#include <cstdint>

namespace cellm::gguf {

struct KScaleMin {
  uint8_t scale;
  uint8_t min;
};

inline KScaleMin unpack_k_scale_min(const uint8_t* packed, int sub_block) {
  const int j = sub_block;
  if (j < 4) return {static_cast<uint8_t>(packed[j] & 63), static_cast<uint8_t>(packed[j + 4] & 63)};
  return {static_cast<uint8_t>((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))};
}

// scales and mins must be < 64.
inline void pack_k_scale_min(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(scales[j] | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>(mins[j] | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4));
  }
}

}  // namespace cellm::gguf
