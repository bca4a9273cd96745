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

// The tiles a format's kernel has (gemm_exact.cu's Tile<F>), and what its steps cost.
enum class GemmTileSet {
  Large,         // 64 x 64 and 32 x 64 of two blocks a multiprocessor; weights decoded each step
  SmallDirect,   // every tile below 64 x 64 too, multiplying the raw super-blocks (Q4_K/Q5_K)
  SmallDecoded,  // the same tiles, each step's weights decoded to int8 rows first (Q6_K)
};

struct GemmTile {
  int activation_rows;  // 16, 32 or 64
  int weight_rows;      // 64 (8 warps) or 32 (4 warps)
  int min_blocks;       // __launch_bounds__'s blocks per multiprocessor: 1, 2 or 4
  bool operator==(const GemmTile&) const = default;
};

// The tile for `tokens` activation rows times `weight_rows` weight rows on `sm_count`
// multiprocessors, for weights whose kernel has the tiles of `set` (gemm_tile_set).
GemmTile choose_gemm_tile(int64_t tokens, int64_t weight_rows, int sm_count, GemmTileSet set);

// Every tile gemm_exact.cu has a kernel for in `set` (SmallDirect and SmallDecoded have the same
// ones), so that tests can run each and a benchmark (CudaMatmulPerf.Llama3_8BTiles,
// Llama3_8BTilesQ6K) can time each against the rule's choice. Each is the rule's choice for some
// shape of the Large or SmallDirect weights (CudaGemmTile tests).
std::span<const GemmTile> gemm_tiles(GemmTileSet set);

}  // namespace cellm::cuda
