#include "backend/cpu/ggml/ggml_matmul.h"

#include <algorithm>

#include "backend/cpu/ggml/ggml_dot.h"
#include "backend/cpu/ggml/ggml_quantize.h"
#include "core/error.h"
#include "gguf/quant_blocks.h"

namespace cellm::cpu::ggml {
namespace {

using gguf::BlockQ8_0;
using gguf::BlockQ8_K;

// The quantized activations a weight type is multiplied with.
enum class ActType { Q8_0, Q8_1, Q8_K };

ActType act_type(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      return ActType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return ActType::Q8_1;
    default:
      return ActType::Q8_K;
  }
}

size_t act_row_bytes(ActType type, int64_t cols) {
  switch (type) {
    case ActType::Q8_0:
      return static_cast<size_t>(cols / gguf::kBlockElements) * sizeof(BlockQ8_0);
    case ActType::Q8_1:
      return static_cast<size_t>(cols / gguf::kBlockElements) * sizeof(BlockQ8_1);
    case ActType::Q8_K:
      return static_cast<size_t>(cols / gguf::kSuperBlockElements) * sizeof(BlockQ8_K);
  }
  return 0;
}

// ggml keeps Q4_0 and Q4_K matrices repacked (8 rows interleaved) when their row count allows
// (ggml_repack_get_optimal_repack_type, on any CPU with AVX2).
bool repacked(const WeightMatrix& w) { return (w.type == DType::Q4_K || w.type == DType::Q4_0) && w.rows % 8 == 0; }

// The products of one weight format, the AVX2 ones where the CPU has them (unless
// CELLM_CPU_ISA=portable asks for the reference code).
struct Products {
  float (*q4_0)(const gguf::BlockQ4_0*, const BlockQ8_0*, int64_t);
  float (*q4_0_repacked)(const gguf::BlockQ4_0*, const BlockQ8_0*, int64_t);
  float (*q4_1)(const gguf::BlockQ4_1*, const BlockQ8_1*, int64_t);
  float (*q5_0)(const gguf::BlockQ5_0*, const BlockQ8_0*, int64_t);
  float (*q5_1)(const gguf::BlockQ5_1*, const BlockQ8_1*, int64_t);
  float (*q8_0)(const BlockQ8_0*, const BlockQ8_0*, int64_t);
  float (*q6_K)(const gguf::BlockQ6_K*, const BlockQ8_K*, int64_t);
  float (*q4_K_repacked)(const gguf::BlockQ4_K*, const BlockQ8_K*, int64_t, bool);
};

const Products& products() {
  static const Products reference{dot_q4_0, dot_q4_0_repacked, dot_q4_1, dot_q5_0,
                                  dot_q5_1, dot_q8_0,          dot_q6_K, dot_q4_K_repacked};
  static const Products simd{avx2::dot_q4_0, avx2::dot_q4_0_repacked, avx2::dot_q4_1, avx2::dot_q5_0,
                             avx2::dot_q5_1, avx2::dot_q8_0,          avx2::dot_q6_K, avx2::dot_q4_K_repacked};
  static const bool use_avx2 = default_matmul_isa() != MatmulIsa::Portable;
  return use_avx2 ? simd : reference;
}

float dot(const Products& p, const WeightMatrix& w, int64_t row, const void* act, int64_t cols, bool in_group) {
  const void* wr = static_cast<const std::byte*>(w.data) + static_cast<size_t>(row) * w.row_bytes;
  const int64_t blocks32 = cols / gguf::kBlockElements, blocks256 = cols / gguf::kSuperBlockElements;
  switch (w.type) {
    case DType::Q4_0:
      return (repacked(w) ? p.q4_0_repacked : p.q4_0)(static_cast<const gguf::BlockQ4_0*>(wr),
                                                      static_cast<const BlockQ8_0*>(act), blocks32);
    case DType::Q4_1:
      return p.q4_1(static_cast<const gguf::BlockQ4_1*>(wr), static_cast<const BlockQ8_1*>(act), blocks32);
    case DType::Q5_0:
      return p.q5_0(static_cast<const gguf::BlockQ5_0*>(wr), static_cast<const BlockQ8_0*>(act), blocks32);
    case DType::Q5_1:
      return p.q5_1(static_cast<const gguf::BlockQ5_1*>(wr), static_cast<const BlockQ8_1*>(act), blocks32);
    case DType::Q8_0:
      return p.q8_0(static_cast<const BlockQ8_0*>(wr), static_cast<const BlockQ8_0*>(act), blocks32);
    case DType::Q6_K:
      return p.q6_K(static_cast<const gguf::BlockQ6_K*>(wr), static_cast<const BlockQ8_K*>(act), blocks256);
    case DType::Q4_K:
      return p.q4_K_repacked(static_cast<const gguf::BlockQ4_K*>(wr), static_cast<const BlockQ8_K*>(act), blocks256,
                             in_group);
    default:
      fail(ErrorCode::Unsupported, "ggml numerics: no product for ", dtype_name(w.type), " weights");
  }
}

void quantize_rows(ActType type, const float* x, int64_t x_stride, int64_t T, int64_t cols, std::byte* out,
                   size_t row_bytes, int64_t four_row_groups_end) {
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * x_stride;
    std::byte* dst = out + static_cast<size_t>(t) * row_bytes;
    switch (type) {
      case ActType::Q8_0:
        quantize_q8_0(row, reinterpret_cast<BlockQ8_0*>(dst), cols);
        break;
      case ActType::Q8_1:
        quantize_q8_1(row, reinterpret_cast<BlockQ8_1*>(dst), cols);
        break;
      case ActType::Q8_K:
        quantize_q8_K(row, reinterpret_cast<BlockQ8_K*>(dst), cols, t < four_row_groups_end);
        break;
    }
  }
}

}  // namespace

bool matmul_supports(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q6_K:
    case DType::Q4_K:
      return true;
    default:
      return false;
  }
}

void require_product(DType type, const std::string& tensor) {
  if (!matmul_supports(type))
    fail(ErrorCode::Unsupported, "ggml numerics: llama.cpp's order for ", dtype_name(type), " weights",
         tensor.empty() ? "" : " (" + tensor + ")", " is not implemented (supported: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K)");
}

std::byte* MatmulBuffers::reserve(size_t bytes) {
  if (bytes_.size() < bytes) bytes_.resize(bytes);
  return bytes_.data();
}

void matmul(ThreadPool& pool, std::span<const WeightMatrix> parts, const float* x, int64_t x_stride, int64_t T,
            float* out, int64_t out_stride, const float* bias, MatmulBuffers& buffers) {
  if (parts.empty() || T <= 0) return;
  const int64_t cols = parts.front().cols;
  const DType type = parts.front().type;
  require_product(type);
  for (const WeightMatrix& w : parts)
    if (w.type == DType::Q4_K && !repacked(w))
      fail(ErrorCode::Unsupported, "ggml numerics: a Q4_K matrix of ", w.rows,
           " rows (not a multiple of 8, which ggml does not repack) is not implemented");
  const ActType at = act_type(type);
  const int64_t block = at == ActType::Q8_K ? gguf::kSuperBlockElements : gguf::kBlockElements;
  if (cols % block != 0)
    fail(ErrorCode::InvalidArgument, "matmul width ", cols, " is not a whole number of ", dtype_name(type), " blocks");
  const size_t row_bytes = act_row_bytes(at, cols);
  std::byte* act = buffers.reserve(row_bytes * static_cast<size_t>(T));
  // Repacked Q4_K: ggml's 4-row groups (T > 3) quantize with their own rule.
  const int64_t groups_end = parts.front().type == DType::Q4_K && repacked(parts.front()) && T > 3 ? T - T % 4 : 0;
  quantize_rows(at, x, x_stride, T, cols, act, row_bytes, groups_end);

  int64_t total_rows = 0;
  for (const WeightMatrix& w : parts) total_rows += w.rows;
  const int64_t tasks = std::min<int64_t>(total_rows, std::max<int64_t>(1, pool.size() * 4));
  const Products& p = products();
  pool.parallel_for(tasks, [&](int64_t task, int) {
    const int64_t begin = total_rows * task / tasks, end = total_rows * (task + 1) / tasks;
    int64_t part_start = 0;
    for (const WeightMatrix& w : parts) {
      const int64_t lo = std::max(begin, part_start), hi = std::min(end, part_start + w.rows);
      for (int64_t n = lo; n < hi; ++n)
        for (int64_t t = 0; t < T; ++t) {
          float v = dot(p, w, n - part_start, act + static_cast<size_t>(t) * row_bytes, cols, t < groups_end);
          if (bias != nullptr) v += bias[n];
          out[t * out_stride + n] = v;
        }
      part_start += w.rows;
    }
  });
}

}  // namespace cellm::cpu::ggml
