#include "backend/cuda/gemm_tile.h"

namespace cellm::cuda {
namespace {

constexpr int kMaxTokens = kGemmMaxActivationRows;
constexpr int kRows = kGemmMaxWeightRows;
constexpr int kBlocksPerSm = kGemmBlocksPerSm;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of `activation_rows` x 64 weight rows that cover the product.
int64_t grid_of(int64_t tokens, int64_t activation_rows, int64_t weight_rows) {
  return ceil_div(tokens, activation_rows) * ceil_div(weight_rows, kRows);
}

// Activation rows a block: 64; 32 where 64 would waste half a block on padding rows (32 or
// fewer) or would leave multiprocessors without a block (llama3-8b's 4096-row products at 64
// rows: 64 blocks for 132 SMs), so that more blocks share the weights' steps. With a block for
// every multiprocessor, 64 rows won: 14336 x 4096 at 64 rows (224 blocks) took 0.065 ms,
// against 0.095 ms as 448 blocks of 32 (H200, Q4_K, when every block decoded its weights).
// The small-tile formats (Q4_K/Q5_K, measured here on multiply_direct, and Q6_K) take 16 for 16
// rows or fewer: H100, Q4_K 14336 x 4096 at 16 rows 0.0646 -> 0.0307 ms. At 64 rows 16 lost to
// 32 (4096 x 4096 0.0256 -> 0.0285 ms, as 256 blocks of 16 against 128 of 32). Past 64 rows
// they also take 32 where tiles of 64 would pad a quarter of their rows or more and tiles of 32
// less (H200, Q4_K, 96 rows: q/k/v 0.0413 ms as 32 x 64 tiles against 0.0454 as
// 64 x 64, gate+up 0.1346 against 0.1413; at 128 rows, no padding either way, 64 x 64 won
// gate+up 0.1463 against 0.1693).
int activation_rows(int64_t tokens, int64_t weight_rows, int sm_count, bool small_tiles) {
  if (small_tiles && tokens <= kMaxTokens / 4) return kMaxTokens / 4;
  if (tokens <= kMaxTokens / 2 || grid_of(tokens, kMaxTokens, weight_rows) < sm_count) return kMaxTokens / 2;
  const int64_t padded_64 = ceil_div(tokens, kMaxTokens) * kMaxTokens;
  const int64_t padded_32 = ceil_div(tokens, kMaxTokens / 2) * (kMaxTokens / 2);
  if (small_tiles && 4 * (padded_64 - padded_32) >= padded_64) return kMaxTokens / 2;
  return kMaxTokens;
}

}  // namespace

// The small-tile formats also choose the weight rows: 32 (4 warps) where blocks of 64 would
// leave multiprocessors idle (Q6_K: below). H100, one run, CudaMatmulPerf.Llama3_8BFewRows, ms at 16 / 32 / 64
// rows, before the 16-row tiles and the 32-row weight tiles -> after: q/k/v 0.0363 -> 0.0208 /
// 0.0256 -> 0.0240 / 0.0387 -> 0.0390; o 0.0286 -> 0.0181 / 0.0249 -> 0.0230 / 0.0251 -> 0.0235;
// gate+up 0.1061 -> 0.0527 / 0.0720 -> 0.0720 / 0.1134 -> 0.1172; down 0.0796 -> 0.0503 / 0.0730
// -> 0.0659 / 0.0741 -> 0.0670.
GemmTile choose_gemm_tile(int64_t tokens, int64_t weight_rows, int sm_count, GemmTileSet set) {
  const int per_block = activation_rows(tokens, weight_rows, sm_count, set != GemmTileSet::Large);
  if (set == GemmTileSet::Large) return {per_block, kRows, kBlocksPerSm};
  // Q6_K decodes each step's weights to int8 rows behind a barrier, work a block does for its
  // weight rows whatever its activation rows: its tiles of 16 and 32 activation rows take 32
  // weight rows, four blocks a multiprocessor, at every shape. H100, one run,
  // CudaMatmulPerf.Llama3_8BTilesQ6K, ms, the other rule's tile -> this one: output (128256 rows)
  // at 8 / 16 / 32 rows 0.4318 -> 0.3944 / 0.4425 -> 0.4069 (16 x 64 / 2) / 0.4781 -> 0.4462
  // (32 x 64 / 2), ffn_down at 48 / 64 rows 0.1268 -> 0.1166 / 0.1279 -> 0.1170 (32 x 64 / 1);
  // where that rule already took 32 weight rows, two or four blocks a multiprocessor were within
  // 1%. Its 64-row tiles follow the rule below.
  //
  // Past 64 rows, where the shared rule drops to 32-row tiles only because blocks of 64 x 64
  // would leave a few multiprocessors idle (ffn_down's 4096 rows at 97-128 rows: 128 blocks for
  // 132 SMs), Q6_K takes them, one a multiprocessor: each block decodes its weights once for 64
  // rows instead of two blocks each decoding them for 32. H100, one run,
  // CudaMatmulPerf.Llama3_8BTilesQ6K, ffn_down at 128 rows: 32 x 32 / 4 0.2080 ms -> 64 x 64 / 1
  // 0.1535 ms (measured at 128 rows only; at 97-127 both tiles pad to 128 rows alike). attn_v's
  // 1024 rows would make a quarter of a round of such blocks; it keeps 32 x 32 / 4, which that
  // run did not find beaten at 128 rows.
  if (set == GemmTileSet::SmallDecoded && tokens > kMaxTokens && per_block == kMaxTokens / 2) {
    const int64_t padded_64 = ceil_div(tokens, kMaxTokens) * kMaxTokens;
    const int64_t grid_64 = grid_of(tokens, kMaxTokens, weight_rows);
    const bool pads_little = 4 * (padded_64 - tokens) < padded_64;
    if (pads_little && 2 * grid_64 > sm_count && grid_64 <= sm_count) return {kMaxTokens, kRows, 1};
  }
  if (set == GemmTileSet::SmallDecoded && per_block <= kMaxTokens / 2) return {per_block, kRows / 2, 4};
  // Blocks of 64 weight rows: how many, and how many multiprocessors they would leave idle.
  const int64_t grid = grid_of(tokens, per_block, weight_rows);
  if (per_block == kMaxTokens / 4) {
    // Fewer than multiprocessors: blocks of 32 weight rows (4 warps), twice as many.
    return grid < sm_count ? GemmTile{per_block, kRows / 2, 4} : GemmTile{per_block, kRows, kBlocksPerSm};
  }
  if (per_block == kMaxTokens / 2) {
    // Half the multiprocessors or fewer: blocks of 32 weight rows, unrolled (up to 255
    // registers for two blocks of 4 warps a multiprocessor). H100, llama3-8b's 4096-row
    // products at 17-32 rows: o 0.0221-0.0227 -> 0.0182-0.0186 ms, down 0.0621-0.0645 ->
    // 0.0503-0.0529.
    if (2 * grid <= sm_count) return {per_block, kRows / 2, 2};
    // One block per multiprocessor or fewer: no second block to make room for.
    if (grid <= sm_count) return {per_block, kRows, 1};
  }
  // One round of two blocks a multiprocessor whose second blocks would go to half the
  // multiprocessors or fewer, so that the busiest one has fewer warps' tiles (llama3-8b's q/k/v
  // at 64 rows: 192 blocks of 8 warps put 16 on 60 SMs and 8 on the others):
  //  - 32-row activation tiles whose rows fit one 64 x 64 tile a multiprocessor, unrolled (255
  //    registers): q/k/v at 40-64 rows (96 blocks). H200, one run (CudaMatmulPerf.Llama3_8BTiles),
  //    ms at 40 / 48 / 56 / 64 rows: 0.0276 / 0.0283 / 0.0301 / 0.0294 as 384 blocks of 32 x 32
  //    -> 0.0240 / 0.0257 / 0.0269 / 0.0282; at 96 rows down 0.0909 -> 0.0884, but o 0.0276 ->
  //    0.0280;
  //  - other 32-row activation tiles: blocks of 32 weight rows (4 warps, four a multiprocessor).
  //    H100, kernel trace of a batch-64 step, one run: q/k/v 34.66 -> 28.27 us a call, before
  //    the 64 x 64 tiles of one block a multiprocessor existed;
  //  - 64-row activation tiles: 32-row ones of 64 weight rows, where 64 x 32 tiles of four blocks
  //    a multiprocessor (which do not unroll within 128 registers) were taken before. H200, q/k/v
  //    at 128 rows: 0.0598 -> 0.0418 ms.
  // Grids of more rounds keep 64 weight rows: gate+up at 64 rows (448 blocks) took 119.95 ->
  // 140.52 us as 896 blocks of 32 (H100).
  const int64_t last_round = grid % sm_count;
  if (grid < 2 * int64_t{sm_count} && last_round != 0 && 2 * last_round <= sm_count) {
    if (per_block == kMaxTokens) return {kMaxTokens / 2, kRows, kBlocksPerSm};
    if (grid_of(tokens, kMaxTokens, weight_rows) <= sm_count) return {kMaxTokens, kRows, 1};
    return {per_block, kRows / 2, 4};
  }
  return {per_block, kRows, kBlocksPerSm};
}

std::span<const GemmTile> gemm_tiles(GemmTileSet set) {
  // Tiles that lost everywhere the rule could pick them are left out: 64 x 32 of four blocks
  // a multiprocessor, and of two (unrolled). H200, CudaMatmulPerf.Llama3_8BTiles at 9-128 rows of
  // llama3-8b's four products, one run: never within 2% of the best tile.
  static constexpr GemmTile kSmall[] = {{16, 64, 2}, {16, 32, 4}, {32, 32, 2}, {32, 64, 1},
                                        {32, 32, 4}, {32, 64, 2}, {64, 64, 2}, {64, 64, 1}};
  static constexpr GemmTile kOther[] = {{32, 64, 2}, {64, 64, 2}};
  if (set == GemmTileSet::Large) return kOther;
  return kSmall;
}

}  // namespace cellm::cuda
