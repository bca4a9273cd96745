// The portable kernels: plain C++ for any CPU, and the definition the SIMD paths are read
// against. Integer dot products per block are exact; floats are accumulated block by block.
#include <array>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "gguf/quant_k_scales.h"

namespace cellm::cpu::detail {
namespace {

using gguf::kBlockElements;
using gguf::kSuperBlockElements;

// A 32-element weight block as signed integer values (offset removed) with its scale and,
// for Q4_1/Q5_1, its offset m (x = d * value + m).
struct DecodedBlock {
  static constexpr int kElements = kBlockElements;
  int8_t values[kBlockElements];
  float d;
  float m;
};

void nibble_values(const uint8_t* qs, int offset, int8_t* v) {
  for (int j = 0; j < kBlockElements / 2; ++j) {
    v[j] = static_cast<int8_t>((qs[j] & 0x0f) - offset);
    v[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}

void add_fifth_bits(const uint8_t* qh_bytes, int8_t* v) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof qh);
  for (int j = 0; j < kBlockElements; ++j) v[j] = static_cast<int8_t>(v[j] + static_cast<int>((qh >> j) & 1u) * 16);
}

void decode_q8_0(const gguf::BlockQ8_0& b, DecodedBlock& out) {
  std::memcpy(out.values, b.qs, kBlockElements);
  out.d = fp16_to_fp32(b.d);
}
void decode_q4_0(const gguf::BlockQ4_0& b, DecodedBlock& out) {
  nibble_values(b.qs, 8, out.values);
  out.d = fp16_to_fp32(b.d);
}
void decode_q4_1(const gguf::BlockQ4_1& b, DecodedBlock& out) {
  nibble_values(b.qs, 0, out.values);
  out.d = fp16_to_fp32(b.d);
  out.m = fp16_to_fp32(b.m);
}
void decode_q5_0(const gguf::BlockQ5_0& b, DecodedBlock& out) {
  nibble_values(b.qs, 0, out.values);
  add_fifth_bits(b.qh, out.values);
  for (int8_t& v : out.values) v = static_cast<int8_t>(v - 16);
  out.d = fp16_to_fp32(b.d);
}
void decode_q5_1(const gguf::BlockQ5_1& b, DecodedBlock& out) {
  nibble_values(b.qs, 0, out.values);
  add_fifth_bits(b.qh, out.values);
  out.d = fp16_to_fp32(b.d);
  out.m = fp16_to_fp32(b.m);
}

int32_t dot(const int8_t* w, const int8_t* a, int n) {
  int32_t sum = 0;
  for (int j = 0; j < n; ++j) sum += static_cast<int32_t>(w[j]) * a[j];
  return sum;
}

// Adds block b of a weight row, decoded as w, times token t's activations to acc.
float add_block(float acc, const DecodedBlock& w, bool with_min, const TileJob& job, int64_t t, int64_t b) {
  const int32_t sum = dot(w.values, job.act->codes(t) + b * kBlockElements, kBlockElements);
  acc = acc + static_cast<float>(sum) * (w.d * job.act->scales(t)[b]);
  if (with_min) acc = acc + w.m * job.act->sums(t)[b];
  return acc;
}

// A k-quant super-block as integer values (0..31, or -32..31 for Q6_K) with a scale per group
// of `group` values and, for Q4_K/Q5_K, a min per sub-block of 32 (x = d*sc*q - dmin*m).
struct DecodedSuperBlock {
  static constexpr int kElements = kSuperBlockElements;
  int8_t values[kSuperBlockElements];
  int32_t scales[16];
  int32_t mins[8];
  int group;
  float d;
  float dmin;
};

template <class Block, bool kFifthBit>
void decode_k(const Block& b, const uint8_t* qh, DecodedSuperBlock& out) {
  for (int s = 0; s < 8; ++s) {
    const gguf::KScaleMin sm = gguf::unpack_k_scale_min(b.scales, s);
    out.scales[s] = sm.scale;
    out.mins[s] = sm.min;
    for (int l = 0; l < 32; ++l) {
      int q = (b.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f;
      if constexpr (kFifthBit) q |= ((qh[l] >> s) & 1) << 4;
      out.values[32 * s + l] = static_cast<int8_t>(q);
    }
  }
  out.group = 32;
  out.d = fp16_to_fp32(b.d);
  out.dmin = fp16_to_fp32(b.dmin);
}

void decode_q4_k(const gguf::BlockQ4_K& b, DecodedSuperBlock& out) { decode_k<gguf::BlockQ4_K, false>(b, nullptr, out); }
void decode_q5_k(const gguf::BlockQ5_K& b, DecodedSuperBlock& out) { decode_k<gguf::BlockQ5_K, true>(b, b.qh, out); }

void decode_q6_k(const gguf::BlockQ6_K& b, DecodedSuperBlock& out) {
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int low = (b.ql[64 * h + l + 32 * (k & 1)] >> (4 * (k / 2))) & 0x0f;
        const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
        out.values[128 * h + 32 * k + l] = static_cast<int8_t>((low | high << 4) - 32);
      }
    }
  }
  for (int g = 0; g < 16; ++g) out.scales[g] = b.scales[g];
  out.group = 16;
  out.d = fp16_to_fp32(b.d);
  out.dmin = 0.0f;
}

float add_block(float acc, const DecodedSuperBlock& w, bool with_min, const TileJob& job, int64_t t, int64_t b) {
  const int8_t* a = job.act->codes(t) + b * kSuperBlockElements;
  int32_t sum = 0;
  for (int g = 0; g < kSuperBlockElements / w.group; ++g)
    sum += w.scales[g] * dot(w.values + g * w.group, a + g * w.group, w.group);
  const float da = job.act->scales(t)[b];
  acc = acc + static_cast<float>(sum) * (w.d * da);
  if (with_min) {
    const int16_t* bsums = job.act->group_sums(t) + 16 * b;
    int32_t min_sum = 0;
    for (int s = 0; s < 8; ++s) min_sum += w.mins[s] * (bsums[2 * s] + bsums[2 * s + 1]);
    acc = acc + static_cast<float>(min_sum) * -(w.dmin * da);
  }
  return acc;
}

template <class Block, class Decoded>
Decoded decoded_type(void (*)(const Block&, Decoded&));

// Any quantized format: decode a row's block once, then add it in for every token of the tile.
template <class Format>
struct BlockKernel {
  using Block = typename Format::Block;
  using Decoded = decltype(decoded_type(Format::unpack));
  static constexpr int kTokens = 4;
  static constexpr int kRows = 1;
  static size_t work_bytes(int64_t) { return 0; }
  static void prepare(const TileJob&, int64_t, int, std::byte*) {}

  template <int MT, int NR>
  static void tile(const TileJob& job, int64_t t0, int64_t n0, const std::byte*) {
    const auto rows = weight_rows<Block, NR>(job, n0);
    std::array<std::array<float, NR>, MT> acc{};
    Decoded w;
    for (int64_t b = 0; b < job.w->cols / Decoded::kElements; ++b) {
      for (int r = 0; r < NR; ++r) {
        Format::unpack(rows[r][b], w);
        for (int i = 0; i < MT; ++i) acc[i][r] = add_block(acc[i][r], w, Format::kHasMin, job, t0 + i, b);
      }
    }
    store_tile<MT, NR>(job, t0, n0, [&](int i, int r) { return acc[i][r]; });
  }
};

// Float weights: eight running sums per output (a fixed interleave), added pairwise at the end.
float widen(const float* row, int64_t k) { return row[k]; }
float widen(const uint16_t* row, int64_t k, bool bf16) { return bf16 ? bf16_to_fp32(row[k]) : fp16_to_fp32(row[k]); }

template <DType kWeightType>
struct FloatWeights {
  static constexpr DType kType = kWeightType;
};

template <class Weights>
struct FloatKernel {
  static constexpr DType kType = Weights::kType;
  static constexpr int kTokens = 4;
  static constexpr int kRows = 1;
  static constexpr int kLanes = 8;
  static size_t work_bytes(int64_t) { return 0; }
  static void prepare(const TileJob&, int64_t, int, std::byte*) {}

  static float weight(const std::byte* row, int64_t k) {
    if constexpr (kType == DType::F32) return widen(reinterpret_cast<const float*>(row), k);
    return widen(reinterpret_cast<const uint16_t*>(row), k, kType == DType::BF16);
  }

  template <int MT, int NR>
  static void tile(const TileJob& job, int64_t t0, int64_t n0, const std::byte*) {
    const auto rows = weight_rows<std::byte, NR>(job, n0);
    std::array<std::array<std::array<float, kLanes>, NR>, MT> acc{};
    for (int64_t k = 0; k < job.w->cols; ++k) {
      for (int r = 0; r < NR; ++r) {
        const float w = weight(rows[r], k);
        for (int i = 0; i < MT; ++i) {
          float& lane = acc[i][r][k % kLanes];
          lane = lane + w * job.x[(t0 + i) * job.x_stride + k];
        }
      }
    }
    store_tile<MT, NR>(job, t0, n0, [&](int i, int r) {
      const auto& l = acc[i][r];
      return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    });
  }
};

struct Portable {
  template <class Format>
  using Block32 = BlockKernel<Format>;
  template <class Format>
  using KQuant = BlockKernel<Format>;
  template <class Element>
  using Float = FloatKernel<Element>;
  using Q8_0 = WeightFormat<gguf::BlockQ8_0, 0, false, &decode_q8_0>;
  using Q4_0 = WeightFormat<gguf::BlockQ4_0, 0, false, &decode_q4_0>;
  using Q4_1 = WeightFormat<gguf::BlockQ4_1, 0, true, &decode_q4_1>;
  using Q5_0 = WeightFormat<gguf::BlockQ5_0, 0, false, &decode_q5_0>;
  using Q5_1 = WeightFormat<gguf::BlockQ5_1, 0, true, &decode_q5_1>;
  using Q4_K = WeightFormat<gguf::BlockQ4_K, 0, true, &decode_q4_k>;
  using Q5_K = WeightFormat<gguf::BlockQ5_K, 0, true, &decode_q5_k>;
  using Q6_K = WeightFormat<gguf::BlockQ6_K, 0, false, &decode_q6_k>;
  using F32 = FloatWeights<DType::F32>;
  using F16 = FloatWeights<DType::F16>;
  using BF16 = FloatWeights<DType::BF16>;
};

}  // namespace

const KernelSet& portable_kernels() { return KernelTable<Portable>::set(); }

}  // namespace cellm::cpu::detail
