#include "backend/cpu/quant_activations.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/quant_activations_scales.h"
#include "core/error.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"

namespace cellm::cpu {
namespace detail {

Q8BlockScale q8_block_scale(float amax) {
  const float d_exact = amax / 127.0f;
  return {fp16_to_fp32(fp32_to_fp16(d_exact)), d_exact, amax != 0.0f ? 127.0f / amax : 0.0f};
}

float q8_1_block_sum(float d_exact, int32_t code_sum) {
  return fp16_to_fp32(fp32_to_fp16(d_exact * static_cast<float>(code_sum)));
}

Q8KBlockScale q8_k_block_scale(float signed_max) {
  const float inverse = -127.0f / signed_max;
  return {1.0f / inverse, inverse};
}

}  // namespace detail

namespace {

// Round half to even, as the SIMD rounding instructions do in the default mode.
int8_t round_code(float v) { return static_cast<int8_t>(std::nearbyint(v)); }

void quantize_q8_blocks(const float* x, int64_t cols, const QuantizedRow& out, bool with_sums) {
  constexpr int kBlock = gguf::kBlockElements;
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    int8_t* q = out.qs + b * kBlock;
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const detail::Q8BlockScale scale = detail::q8_block_scale(amax);
    int32_t sum = 0;
    for (int j = 0; j < kBlock; ++j) {
      q[j] = round_code(xb[j] * scale.inverse);
      sum += q[j];
    }
    out.d[b] = scale.d;
    if (with_sums) out.s[b] = detail::q8_1_block_sum(scale.d_exact, sum);
  }
}

void quantize_q8_k_blocks(const float* x, int64_t cols, const QuantizedRow& out) {
  constexpr int kBlock = gguf::kSuperBlockElements;
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    int8_t* q = out.qs + b * kBlock;
    int16_t* bsums = out.bsums + b * (kBlock / 16);
    float amax = 0.0f;
    float signed_max = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        signed_max = xb[j];
      }
    }
    if (amax == 0.0f) {
      out.d[b] = 0.0f;
      std::memset(q, 0, kBlock);
      std::memset(bsums, 0, sizeof(int16_t) * (kBlock / 16));
      continue;
    }
    const detail::Q8KBlockScale scale = detail::q8_k_block_scale(signed_max);
    for (int j = 0; j < kBlock; ++j) {
      const float v = std::nearbyint(scale.inverse * xb[j]);
      q[j] = static_cast<int8_t>(std::fmin(127.0f, v));
    }
    for (int g = 0; g < kBlock / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += q[16 * g + j];
      bsums[g] = static_cast<int16_t>(sum);
    }
    out.d[b] = scale.d;
  }
}

}  // namespace

std::optional<ActivationFormat> activation_format_for(DType weight) {
  switch (weight) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
      return ActivationFormat::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return ActivationFormat::Q8_1;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return ActivationFormat::Q8_K;
    default:
      return std::nullopt;
  }
}

int activation_block_size(ActivationFormat format) {
  return format == ActivationFormat::Q8_K ? gguf::kSuperBlockElements : gguf::kBlockElements;
}

void quantize_activation_row(ActivationFormat format, const float* x, int64_t cols, const QuantizedRow& out,
                             MatmulIsa isa) {
  if (cols % activation_block_size(format) != 0)
    fail(ErrorCode::InvalidArgument, "activation row of ", cols, " values is not a whole number of blocks of ",
         activation_block_size(format));
  if (isa != MatmulIsa::Portable) return detail::quantize_activation_row_avx2(format, x, cols, out);
  if (format == ActivationFormat::Q8_K) return quantize_q8_k_blocks(x, cols, out);
  quantize_q8_blocks(x, cols, out, format == ActivationFormat::Q8_1);
}

}  // namespace cellm::cpu
