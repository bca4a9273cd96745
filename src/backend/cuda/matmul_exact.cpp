// Which operands the exact kernels take, and the dispatch between them (gemv.h): float weights
// to the float kernel, quantized weights to the one-token kernel for one row (or a few, where it
// beats the streaming kernel: gemv_one_token_max_rows), the streaming kernel for a few and the
// tensor-core kernel for many; every choice gives the same bits.
#include <cstdint>

#include "backend/cuda/gemv.h"
#include "backend/cuda/matmul_kernels.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

// From here on the tensor-core kernel beats streaming the weights: the one-row kernel's time
// grows with the rows (H200, Q4_K 32768 x 8192: 0.18 ms at 8 rows, 827 GB/s) while the
// tensor-core kernel's stays near 0.2 ms from 16 rows to 64 (0.204 and 0.230 ms).
// Measured again with the 16-row activation tiles of Q4_K/Q5_K (H100, llama3-8b's shapes, one
// run): in CudaMatmulPerf.Llama3_8BFewRows the tensor-core kernel from 5 rows won on q/k/v and
// gate+up and lost on o and down at 5-6 rows (sum of a layer's four at 8 rows 0.191 -> 0.138
// ms), but in the model, where the one-token kernel's weights start before the kernel ahead
// ends, batch 8 generation was the same (from 9 rows 1149.3 / 1146.7 tok/s, from 5 1149.9 /
// 1154.3).
constexpr int64_t kExactGemmMinRows = 9;
// The formats with the small tiles (gemm_tile_set: Q4_K/Q5_K, whose tiles multiply the raw
// super-blocks, and Q6_K) from 5 rows since early-started grids are spread (kernel_launch.cuh;
// the o and down products had lost at 5-6 rows above, their blocks packed onto few
// multiprocessors). H100, one run, generation tok/s (the tensor-core product's grids spread):
// llama3-8b Q4_K batch 8 (a graph of 8 rows) 1142 / 1136 -> 1683 / 1669 (1.47x, two rounds),
// llama3-8b Q4_K_M batch 8 906 -> 1163 (1.28x). Q6_K, then in tiles of 32 x 64, lost from 5
// rows (Q4_K_M's batch 8 1163 -> 1085); in tiles of 16 x 32 it wins: H100, one run, Q4_K_M
// (batch 5-8 is a graph of 8 rows), two rounds each, batch 5 772.5 / 770.0 -> 925.2 / 923.9,
// batch 8 1247.6 / 1228.5 -> 1472.7 / 1471.6 (1.19x). The formats of the two large tiles stay at
// 9: SmolLM2's shape (Q4_1) batch 8 5189 -> 5334 (one round, not taken).
constexpr int64_t kSmallTileGemmMinRows = 5;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool float_weights(DType type) { return type == DType::F32 || type == DType::F16 || type == DType::BF16; }

}  // namespace

bool exact_matmul_supported(const TensorRef& x, const TensorRef& w) {
  ActivationFormat format;
  const bool known = float_weights(w.dtype) || activation_format_for(w.dtype, format);
  return known && x.dtype == DType::F32 && x.cols == w.cols && w.cols % 32 == 0 && w.cols <= int64_t{1} << 20 &&
         aligned16(x.data) && x.row_stride % 16 == 0 && aligned16(w.data) && w.row_stride % 16 == 0 &&
         w.row_stride >= (row_bytes(w.dtype, w.cols) + 15) / 16 * 16;
}

void launch_exact_matmul(const TensorRef& x, const QuantizedActivations& q, const TensorRef& w,
                         const ProductAddend& addend, const TensorRef& out, int sm_count, cudaStream_t stream) {
  if (!exact_matmul_supported(x, w) || out.rows != x.rows || out.cols != w.rows || out.dtype != DType::F32)
    fail(ErrorCode::Internal, "exact matmul: unsupported operands (", dtype_name(w.dtype), ", ", x.rows, " x ",
         x.cols, " by ", w.rows, " x ", w.cols, ")");
  if (float_weights(w.dtype))
    launch_gemv_float(x, w, addend, out, sm_count, stream);
  else if (x.rows >= (gemm_tile_set(w.dtype) == GemmTileSet::Large ? kExactGemmMinRows : kSmallTileGemmMinRows))
    launch_gemm_quantized(q, x.rows, w, addend, out, sm_count, stream);
  else if (x.rows <= gemv_one_token_max_rows(w))
    launch_gemv_one_token(x, &q, w, addend, out, sm_count, stream);
  else
    launch_gemv_quantized(q, x.rows, w, addend, out, sm_count, stream);
}

}  // namespace cellm::cuda
