#pragma once
// Element access for the unquantized formats (f32, f16, bf16) of weights and KV pools.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace cellm::cuda {

__device__ __forceinline__ float load_plain(DType type, const void* row, int64_t i) {
  switch (type) {
    case DType::F16: return __half2float(static_cast<const __half*>(row)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(row)[i]);
    default: return static_cast<const float*>(row)[i];
  }
}

__device__ __forceinline__ void store_plain(DType type, void* row, int64_t i, float value) {
  switch (type) {
    case DType::F16: static_cast<__half*>(row)[i] = __float2half_rn(value); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(row)[i] = __float2bfloat16_rn(value); break;
    default: static_cast<float*>(row)[i] = value; break;
  }
}

// The two 16-bit values of a word (low half first) as floats: IEEE halves, or bfloat16s.
template <bool kBf16>
__device__ __forceinline__ float2 unpack_16x2(uint32_t word) {
  if constexpr (kBf16) {
    return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
  } else {
    return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu))),
                       __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16))));
  }
}

inline bool is_plain(DType type) { return type == DType::F32 || type == DType::F16 || type == DType::BF16; }

}  // namespace cellm::cuda
