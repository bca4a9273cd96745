#pragma once
// The exact kernels behind launch_exact_matmul (matmul_kernels.h): weight-streaming ones for
// quantized weights (gemv.cu) and F32/F16/BF16 weights (gemv_float.cu), and a tensor-core one
// for quantized weights and many activation rows (gemm_exact.cu). The streaming kernels take the
// activation rows in tiles of up to kGemvTileTokens (grid x) and spread the weight rows over a
// grid sized to fill the device once (grid y, each warp a contiguous range of rows), so tiles
// that run side by side share the weights through L2.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_tile.h"
#include "backend/cuda/matmul_kernels.h"

namespace cellm::cuda {

inline constexpr int kGemvTileTokens = 8;
inline constexpr int kGemvWarps = 4;
inline constexpr int kGemvThreads = 32 * kGemvWarps;

// Token tiles x row ranges: `units` rows (or row groups) over warps of kGemvWarps-warp blocks.
struct GemvGrid {
  dim3 grid;
  int64_t units_per_warp = 1;
};

// Blocks of `kernel` one multiprocessor holds (callers keep it in a static per instantiation).
template <typename Kernel>
int gemv_blocks_per_sm(Kernel kernel) {
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kGemvThreads, 0), "gemv occupancy");
  return std::max(blocks, 1);
}

inline GemvGrid gemv_grid(int blocks_per_sm, int64_t units, int64_t tokens, int tile_tokens, int sm_count) {
  const int64_t tiles = (tokens + tile_tokens - 1) / tile_tokens;
  const int64_t wave = std::max<int64_t>(1, int64_t{sm_count} * blocks_per_sm / tiles);
  const int64_t blocks = std::min<int64_t>((units + kGemvWarps - 1) / kGemvWarps, wave);
  GemvGrid g;
  g.units_per_warp = (units + blocks * kGemvWarps - 1) / (blocks * kGemvWarps);
  const int64_t used = (units + g.units_per_warp * kGemvWarps - 1) / (g.units_per_warp * kGemvWarps);
  g.grid = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(used));
  return g;
}

void launch_gemv_quantized(const QuantizedActivations& q, int64_t tokens, const TensorRef& w, const ProductAddend& addend,
                           const TensorRef& out, int sm_count, cudaStream_t stream);
// One f32 activation row, or up to gemv_one_token_max_rows(w) rows quantized already
// (gemv_one_token.cu: each staged weight segment serves every row): the same results as
// launch_exact_matmul. `q` holds x quantized (launch_quantize_activations), or is null: then
// the kernel quantizes its one row itself, one launch instead of two, which pays while the row
// is short (kGemvQuantizeMaxColumns: each block quantizes the whole row) and launches are made
// one by one (matmul.cpp). Supported for every quantized type of the exact kernels with rows of
// at most 32768 columns.
inline constexpr int64_t kGemvQuantizeMaxColumns = 2048;
inline constexpr int64_t kGemvSharedWeightsMaxRows = 8;
bool gemv_one_token_supported(const TensorRef& w);
// The most activation rows one launch takes for these weights where it beats gemv.cu: 8 for the
// k-quants, 2 for the 32-element formats; 0 where unsupported.
int64_t gemv_one_token_max_rows(const TensorRef& w);
void launch_gemv_one_token(const TensorRef& x, const QuantizedActivations* q, const TensorRef& w, const ProductAddend& addend,
                           const TensorRef& out, int sm_count, cudaStream_t stream);
// The tensor-core kernel for many activation rows (gemm_exact.cu): the same results, in the
// tile choose_gemm_tile picks for these weights on `sm_count` multiprocessors.
void launch_gemm_quantized(const QuantizedActivations& q, int64_t tokens, const TensorRef& w, const ProductAddend& addend,
                           const TensorRef& out, int sm_count, cudaStream_t stream);
// The same in a given tile, one of gemm_tiles(gemm_tile_set(w.dtype)) (tests and tile
// benchmarks; any other fails with an Internal error).
void launch_gemm_quantized_tile(const QuantizedActivations& q, int64_t tokens, const TensorRef& w, const ProductAddend& addend,
                                const TensorRef& out, const GemmTile& tile, cudaStream_t stream);
// The tiles gemm_exact.cu has for the weights, and whether they multiply the raw super-blocks
// (Q4_K/Q5_K) or decode them first (gemm_tile.h).
GemmTileSet gemm_tile_set(DType type);
void launch_gemv_float(const TensorRef& x, const TensorRef& w, const ProductAddend& addend, const TensorRef& out,
                       int sm_count,
                       cudaStream_t stream);

}  // namespace cellm::cuda
