#pragma once
// Random weights of every format, random activations, and the reference the matmul kernels
// are held to: weights dequantized by gguf::dequantize_row, activations quantized by the
// portable quantizer and widened back, dot products in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_activations.h"
#include "core/dtype.h"
#include "core/half.h"
#include "gguf/dequantize.h"
#include "gguf/quant_blocks.h"

namespace cellm::test {

inline const std::vector<DType>& matmul_weight_types() {
  static const std::vector<DType> types = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return types;
}

inline std::vector<cpu::MatmulIsa> available_isas() {
  std::vector<cpu::MatmulIsa> isas;
  for (auto isa : {cpu::MatmulIsa::Portable, cpu::MatmulIsa::Avx2, cpu::MatmulIsa::Avx512})
    if (cpu::matmul_isa_available(isa)) isas.push_back(isa);
  return isas;
}

inline std::string format_and_isa_name(const testing::TestParamInfo<std::tuple<DType, cpu::MatmulIsa>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" +
         std::string(cpu::matmul_isa_name(std::get<1>(info.param)));
}

// Where a block keeps its fp16 scale (and offset, or min) fields.
struct HalfFields {
  int d = -1;
  int m = -1;  // Q4_1/Q5_1 offset, Q4_K/Q5_K dmin
};

inline HalfFields half_fields(DType type) {
  switch (type) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
      return {0, -1};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q6_K:
      return {offsetof(gguf::BlockQ6_K, d), -1};
    default:
      return {};
  }
}

struct RandomWeights {
  std::vector<uint8_t> bytes;
  cpu::WeightMatrix matrix;
};

// Code bytes are uniformly random, so every bit pattern of every field occurs (Q8_0's -128,
// 6-bit k-scales with their high bits, negative Q6_K scales); the fp16 scales are finite.
inline RandomWeights random_weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  RandomWeights w;
  const size_t row_size = row_bytes(type, cols);
  w.bytes.resize(row_size * rows);
  w.matrix = {type, nullptr, rows, cols, row_size};
  auto put_half = [&](size_t at, float v) {
    const uint16_t h = type == DType::BF16 ? fp32_to_bf16(v) : fp32_to_fp16(v);
    std::memcpy(&w.bytes[at], &h, 2);
  };
  if (type == DType::F32) {
    for (size_t i = 0; i < w.bytes.size() / 4; ++i) {
      const float v = unit(rng);
      std::memcpy(&w.bytes[4 * i], &v, 4);
    }
  } else if (type == DType::F16 || type == DType::BF16) {
    for (size_t i = 0; i < w.bytes.size() / 2; ++i) put_half(2 * i, unit(rng));
  } else {
    for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
    const HalfFields fields = half_fields(type);
    const size_t block = dtype_info(type).block_bytes;
    const bool k_quant = dtype_info(type).block_size == 256;
    for (size_t at = 0; at < w.bytes.size(); at += block) {
      put_half(at + fields.d, k_quant ? 0.002f * (1.5f + unit(rng)) : 0.03f * unit(rng));
      if (fields.m >= 0) put_half(at + fields.m, k_quant ? 0.004f * (1.5f + unit(rng)) : 0.5f * unit(rng));
    }
  }
  w.matrix.data = w.bytes.data();
  return w;
}

// Activation rows of `stride` floats; a few rows carry outliers and one block is all zeros,
// as real hidden states do.
inline std::vector<float> random_activations(int64_t T, int64_t cols, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * stride), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < cols; ++k) x[t * stride + k] = normal(rng);
    if (t % 5 == 1) x[t * stride + (t * 7) % cols] = 40.0f;
    if (t % 7 == 3)
      for (int64_t k = 0; k < std::min<int64_t>(cols, 32); ++k) x[t * stride + k] = 0.0f;
  }
  return x;
}

struct ReferenceResult {
  std::vector<double> value;      // T x rows
  std::vector<double> tolerance;  // per element
};

// The activations one row turns into, as floats, plus the Q8_1 block sums.
struct DequantizedActivations {
  std::vector<float> values;
  std::vector<float> block_sums;
};

inline DequantizedActivations quantized_row(DType weight, const float* x, int64_t cols) {
  DequantizedActivations out;
  const auto format = cpu::activation_format_for(weight);
  if (!format) {
    out.values.assign(x, x + cols);
    return out;
  }
  const int block = cpu::activation_block_size(*format);
  std::vector<int8_t> qs(cols);
  std::vector<float> d(cols / block), s(cols / block);
  std::vector<int16_t> bsums(cols / 16);
  cpu::quantize_activation_row(*format, x, cols, {qs.data(), d.data(), s.data(), bsums.data()},
                               cpu::MatmulIsa::Portable);
  out.values.resize(cols);
  for (int64_t k = 0; k < cols; ++k) out.values[k] = static_cast<float>(qs[k]) * d[k / block];
  out.block_sums = s;
  return out;
}

// Q4_1/Q5_1 carry their offsets through the Q8_1 sums, rounded to fp16; the bound adds that.
inline ReferenceResult reference_matmul(const cpu::WeightMatrix& w, const float* x, int64_t x_stride, int64_t T) {
  ReferenceResult ref;
  ref.value.resize(static_cast<size_t>(T * w.rows));
  ref.tolerance.resize(ref.value.size());
  std::vector<float> weights(static_cast<size_t>(w.rows * w.cols));
  for (int64_t n = 0; n < w.rows; ++n)
    gguf::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + n * w.row_bytes, &weights[n * w.cols], w.cols);
  const bool q8_1 = w.type == DType::Q4_1 || w.type == DType::Q5_1;
  const size_t block_bytes = dtype_info(w.type).block_bytes;
  for (int64_t t = 0; t < T; ++t) {
    const DequantizedActivations a = quantized_row(w.type, x + t * x_stride, w.cols);
    for (int64_t n = 0; n < w.rows; ++n) {
      double sum = 0.0;
      double magnitude = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double p = static_cast<double>(weights[n * w.cols + k]) * a.values[k];
        sum += p;
        magnitude += std::fabs(p);
      }
      double offset_error = 0.0;
      if (q8_1) {
        for (int64_t b = 0; b < w.cols / 32; ++b) {
          uint16_t m;
          std::memcpy(&m, static_cast<const uint8_t*>(w.data) + n * w.row_bytes + b * block_bytes + 2, 2);
          offset_error += std::fabs(fp16_to_fp32(m) * a.block_sums[b]) / 512.0;
        }
      }
      ref.value[t * w.rows + n] = sum;
      ref.tolerance[t * w.rows + n] = 1e-4 * magnitude + offset_error + 1e-6;
    }
  }
  return ref;
}

}  // namespace cellm::test
