#pragma once
// What the matmul driver hands the per-ISA kernels: a rectangle of the output (tokens x weight
// rows) and the activations, already quantized once per call. Each ISA file exports one
// kernel per weight type; a kernel walks its rectangle in tiles and never looks outside it.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/matmul.h"

namespace cellm::cpu::detail {

// Quantized activations of T rows (see quant_activations.h for the formats).
struct QuantizedActivations {
  const int8_t* qs = nullptr;
  int64_t qs_stride = 0;  // bytes between tokens
  const float* d = nullptr;
  const float* s = nullptr;  // Q8_1 block sums
  int64_t block_stride = 0;  // floats between tokens in d and s
  const int16_t* bsums = nullptr;
  int64_t bsums_stride = 0;  // int16 between tokens

  const int8_t* codes(int64_t t) const { return qs + t * qs_stride; }
  const float* scales(int64_t t) const { return d + t * block_stride; }
  const float* sums(int64_t t) const { return s + t * block_stride; }
  const int16_t* group_sums(int64_t t) const { return bsums + t * bsums_stride; }
};

// The most tokens one job covers (the driver cuts T into blocks of this size).
inline constexpr int64_t kMaxJobTokens = 64;

struct TileJob {
  const WeightMatrix* w = nullptr;
  const QuantizedActivations* act = nullptr;  // quantized weight types
  const float* x = nullptr;                   // float weight types read the activations as given
  int64_t x_stride = 0;
  int64_t t_begin = 0, t_end = 0;  // tokens
  int64_t n_begin = 0, n_end = 0;  // weight rows (outputs)
  float* out = nullptr;
  int64_t out_stride = 0;
  const float* bias = nullptr;
  std::byte* work = nullptr;  // this thread's work area, work_bytes(type, cols) long, 64-aligned
};

using TileKernel = void (*)(const TileJob& job);

struct KernelSet {
  TileKernel (*kernel_for)(DType type);  // null for types the path does not handle
  size_t (*work_bytes)(DType type, int64_t cols);
};

const KernelSet& portable_kernels();
const KernelSet& avx2_kernels();
const KernelSet& avx512_kernels();

}  // namespace cellm::cpu::detail
