// Which tile the tensor-core product (gemm_exact.cu) runs for a shape: how many activation rows
// and weight rows a block owns, and how many blocks a multiprocessor must hold (the launch
// bound, which decides the registers a thread may take). Kept apart from the kernel, in plain
// C++, so that the rule is one function and can be checked without a GPU.
#pragma once

#include <cstdint>
#include <span>

namespace cellm::cuda {

// The largest tile, and the launch bound of the default one (gemm_exact.cu says why two).
inline constexpr int kGemmMaxActivationRows = 64;
inline constexpr int kGemmMaxWeightRows = 64;
inline constexpr int kGemmBlocksPerSm = 2;

struct GemmTile {
  int activation_rows;  // 16, 32 or 64
  int weight_rows;      // 64 (8 warps) or 32 (4 warps)
  int min_blocks;       // __launch_bounds__'s blocks per multiprocessor: 1, 2 or 4
  bool operator==(const GemmTile&) const = default;
};

// The tile for `tokens` activation rows times `weight_rows` weight rows on `sm_count`
// multiprocessors. `small_tiles`: the weights' kernel has the 16-row activation tiles and the
// 32-row weight tiles (Q4_K/Q5_K, which multiply their raw super-blocks, and Q6_K:
// gemm_small_tiles_format); other formats take 64 x 64 or 32 x 64, two blocks a multiprocessor.
GemmTile choose_gemm_tile(int64_t tokens, int64_t weight_rows, int sm_count, bool small_tiles);

// Every tile gemm_exact.cu has a kernel for (`small_tiles`: Q4_K/Q5_K/Q6_K's), each the rule's
// choice for some shape (CudaGemmTile tests), so that tests can run each and a benchmark
// (CudaMatmulPerf.Llama3_8BTiles) can time each against the rule's choice.
std::span<const GemmTile> gemm_tiles(bool small_tiles);

}  // namespace cellm::cuda
