#include "backend/cpu/ggml/ggml_dot.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/ggml/ggml_sums.h"
#include "core/half.h"
#include "gguf/quant_k_scales.h"

namespace cellm::cpu::ggml {
namespace {

using gguf::kBlockElements;

// The eight lane sums of a 32-element block: lane l = sum of a[e] * b[e] for e in 4l..4l+3.
void lane_sums(const int8_t* a, const int8_t* b, int32_t* lanes) {
  for (int l = 0; l < 8; ++l) {
    int32_t s = 0;
    for (int e = 4 * l; e < 4 * l + 4; ++e) s += a[e] * b[e];
    lanes[l] = s;
  }
}

// acc[l] += d * lanes[l], fused.
void accumulate(float* acc, float d, const int32_t* lanes) {
  for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lanes[l]), acc[l]);
}

// A 32-element block's codes as signed bytes (nibbles low then high, plus an offset or a
// fifth bit).
void nibbles(const uint8_t* qs, int offset, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>((qs[j] & 0x0f) - offset);
    out[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}

void fifth_bits(const uint8_t* qh, int8_t* codes, int high_bit_value, int offset) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  for (int j = 0; j < kBlockElements; ++j)
    codes[j] = static_cast<int8_t>(codes[j] + ((bits >> j) & 1u) * high_bit_value - offset);
}

template <typename Block, typename Act, typename Codes>
float dot_blocks(const Block* x, const Act* y, int64_t blocks, Codes&& codes) {
  float acc[8] = {};
  int8_t q[kBlockElements];
  int32_t lanes[8];
  for (int64_t b = 0; b < blocks; ++b) {
    codes(x[b], q);
    lane_sums(q, y[b].qs, lanes);
    accumulate(acc, fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d), lanes);
  }
  return hsum8(acc);
}

template <typename Block>
float offsets(const Block* x, const BlockQ8_1* y, int64_t blocks) {
  float summs = 0;
  for (int64_t b = 0; b < blocks; ++b) summs = std::fma(fp16_to_fp32(x[b].m), fp16_to_fp32(y[b].s), summs);
  return summs;
}

}  // namespace

float offset_sum(const gguf::BlockQ4_1* x, const BlockQ8_1* y, int64_t blocks) { return offsets(x, y, blocks); }
float offset_sum(const gguf::BlockQ5_1* x, const BlockQ8_1* y, int64_t blocks) { return offsets(x, y, blocks); }

float dot_q4_0(const gguf::BlockQ4_0* x, const gguf::BlockQ8_0* y, int64_t blocks) {
  return dot_blocks(x, y, blocks, [](const gguf::BlockQ4_0& b, int8_t* q) { nibbles(b.qs, 8, q); });
}

float dot_q4_0_repacked(const gguf::BlockQ4_0* x, const gguf::BlockQ8_0* y, int64_t blocks) {
  float acc = 0;
  int8_t q[kBlockElements];
  int32_t lanes[8];
  for (int64_t b = 0; b < blocks; ++b) {
    nibbles(x[b].qs, 8, q);
    lane_sums(q, y[b].qs, lanes);
    int32_t sum = 0;
    for (int32_t l : lanes) sum += l;
    acc = std::fma(static_cast<float>(sum), fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d), acc);
  }
  return acc;
}

float dot_q4_1(const gguf::BlockQ4_1* x, const BlockQ8_1* y, int64_t blocks) {
  const float sum = dot_blocks(x, y, blocks, [](const gguf::BlockQ4_1& b, int8_t* q) { nibbles(b.qs, 0, q); });
  return sum + offset_sum(x, y, blocks);
}

float dot_q5_0(const gguf::BlockQ5_0* x, const gguf::BlockQ8_0* y, int64_t blocks) {
  return dot_blocks(x, y, blocks, [](const gguf::BlockQ5_0& b, int8_t* q) {
    nibbles(b.qs, 0, q);
    fifth_bits(b.qh, q, 16, 16);
  });
}

float dot_q5_1(const gguf::BlockQ5_1* x, const BlockQ8_1* y, int64_t blocks) {
  const float sum = dot_blocks(x, y, blocks, [](const gguf::BlockQ5_1& b, int8_t* q) {
    nibbles(b.qs, 0, q);
    fifth_bits(b.qh, q, 16, 0);
  });
  return sum + offset_sum(x, y, blocks);
}

float dot_q8_0(const gguf::BlockQ8_0* x, const gguf::BlockQ8_0* y, int64_t blocks) {
  return dot_blocks(x, y, blocks, [](const gguf::BlockQ8_0& b, int8_t* q) { std::memcpy(q, b.qs, kBlockElements); });
}

float dot_q6_K(const gguf::BlockQ6_K* x, const gguf::BlockQ8_K* y, int64_t blocks) {
  float acc[8] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    const gguf::BlockQ6_K& w = x[b];
    int32_t sumi[8] = {};
    for (int e = 0; e < gguf::kSuperBlockElements; e += 4) {
      const int half = e / 128, k = (e % 128) / 32;
      int32_t s = 0;
      for (int i = e; i < e + 4; ++i) {
        const int l = i % 32;
        const uint8_t low = w.ql[64 * half + l + 32 * (k & 1)];
        const int nib = k < 2 ? (low & 0x0f) : (low >> 4);
        const int high = (w.qh[32 * half + l] >> (2 * k)) & 3;
        s += ((nib | (high << 4)) - 32) * y[b].qs[i];
      }
      sumi[(e % 32) / 4] += w.scales[e / 16] * s;
    }
    const float d = y[b].d * fp16_to_fp32(w.d);
    accumulate(acc, d, sumi);
  }
  return hsum8(acc);
}

float dot_q4_K_repacked(const gguf::BlockQ4_K* x, const gguf::BlockQ8_K* y, int64_t blocks, bool in_group) {
  float acc = 0, acc_min = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const gguf::BlockQ4_K& w = x[b];
    const float scale = fp16_to_fp32(w.d) * y[b].d, min_scale = fp16_to_fp32(w.dmin) * y[b].d;
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 8; ++s) {
      const gguf::KScaleMin k = gguf::unpack_k_scale_min(w.scales, s);
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = w.qs[32 * (s / 2) + l];
        dot += ((s & 1) ? byte >> 4 : byte & 0x0f) * y[b].qs[32 * s + l];
      }
      isum += k.scale * dot;
      imin += k.min * (y[b].bsums[2 * s] + y[b].bsums[2 * s + 1]);
      if (in_group ? s % 2 == 1 : s == 7) {
        acc = std::fma(static_cast<float>(isum), scale, acc);
        acc_min = std::fma(static_cast<float>(imin), min_scale, acc_min);
        isum = imin = 0;
      }
    }
  }
  return acc - acc_min;
}

}  // namespace cellm::cpu::ggml
