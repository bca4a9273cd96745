#pragma once
// What every ISA's kernels share. A job's rectangle is cut into tiles of up to
// Kernel::kTokens tokens x Kernel::kRows weight rows; the tokens of each tile row are prepared
// once (Kernel::prepare writes per-token values into the thread's work area) and every tile is
// computed by Kernel::tile<MT, NR>. A tile gives each output element its own accumulator and
// the same operations whatever MT and NR, which is what makes results batch-invariant.
//
// Everything here has internal linkage (the unnamed namespace): the header is included by
// files compiled with different ISA flags, and a shared inline function compiled for AVX-512
// in one of them could otherwise be the copy the linker keeps for all.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/cpu/matmul_kernels.h"
#include "gguf/quant_blocks.h"

namespace cellm::cpu::detail {
namespace {

using gguf::BlockQ4_0;
using gguf::BlockQ4_1;
using gguf::BlockQ4_K;
using gguf::BlockQ5_0;
using gguf::BlockQ5_1;
using gguf::BlockQ5_K;
using gguf::BlockQ6_K;
using gguf::BlockQ8_0;

template <class Kernel>
using TileFunction = void (*)(const TileJob& job, int64_t t0, int64_t n0, const std::byte* work);

template <class Kernel, int MT, int... NR>
constexpr std::array<TileFunction<Kernel>, sizeof...(NR)> tile_row(std::integer_sequence<int, NR...>) {
  return {&Kernel::template tile<MT, NR + 1>...};
}

template <class Kernel, int... MT>
constexpr auto tile_table(std::integer_sequence<int, MT...>) {
  return std::array{tile_row<Kernel, MT + 1>(std::make_integer_sequence<int, Kernel::kRows>{})...};
}

template <class Kernel>
void walk_tiles(const TileJob& job) {
  static constexpr auto table = tile_table<Kernel>(std::make_integer_sequence<int, Kernel::kTokens>{});
  for (int64_t t0 = job.t_begin; t0 < job.t_end; t0 += Kernel::kTokens) {
    const int mt = static_cast<int>(std::min<int64_t>(Kernel::kTokens, job.t_end - t0));
    Kernel::prepare(job, t0, mt, job.work);
    for (int64_t n0 = job.n_begin; n0 < job.n_end; n0 += Kernel::kRows) {
      const int nr = static_cast<int>(std::min<int64_t>(Kernel::kRows, job.n_end - n0));
      table[mt - 1][nr - 1](job, t0, n0, job.work);
    }
  }
}

template <class Block, int NR>
std::array<const Block*, NR> weight_rows(const TileJob& job, int64_t n0) {
  std::array<const Block*, NR> rows;
  const auto* base = static_cast<const std::byte*>(job.w->data);
  for (int r = 0; r < NR; ++r)
    rows[r] = reinterpret_cast<const Block*>(base + static_cast<size_t>(n0 + r) * job.w->row_bytes);
  return rows;
}

// Writes one tile's results; `sum(i, r)` reduces the accumulator of token t0+i, row n0+r.
template <int MT, int NR, class Reduce>
void store_tile(const TileJob& job, int64_t t0, int64_t n0, Reduce sum) {
  for (int i = 0; i < MT; ++i) {
    float* out = job.out + (t0 + i) * job.out_stride + n0;
    for (int r = 0; r < NR; ++r) out[r] = job.bias ? sum(i, r) + job.bias[n0 + r] : sum(i, r);
  }
}

// A quantized weight format as a kernel sees it: the block, the offset its unsigned codes
// carry, whether blocks have an additive offset (Q4_1/Q5_1, or the mins of Q4_K/Q5_K), and the
// ISA's function that unpacks blocks.
template <class BlockType, int kCodeOffset, bool kWithMin, auto kUnpack>
struct WeightFormat {
  using Block = BlockType;
  static constexpr int kOffset = kCodeOffset;
  static constexpr bool kHasMin = kWithMin;
  static constexpr auto unpack = kUnpack;
};

// The 6-bit scales and mins of Q4_K/Q5_K (see gguf/quant_k_scales.h), eight bytes each.
struct KScales {
  uint64_t scales;
  uint64_t mins;
};

inline KScales unpack_k_scales(const uint8_t* packed) {
  uint32_t a[3];
  std::memcpy(a, packed, sizeof a);
  const uint32_t sc_high = (a[2] & 0x0f0f0f0fu) | (((a[0] >> 6) & 0x03030303u) << 4);
  const uint32_t min_high = ((a[2] >> 4) & 0x0f0f0f0fu) | (((a[1] >> 6) & 0x03030303u) << 4);
  return {(a[0] & 0x3f3f3f3fu) | static_cast<uint64_t>(sc_high) << 32,
          (a[1] & 0x3f3f3f3fu) | static_cast<uint64_t>(min_high) << 32};
}

// Per token and super-block, what the k-quant kernels need from Q8_K's group sums: for
// Q4_K/Q5_K the 8 sub-block sums (for the mins), for Q6_K the 16 negated sums (for its -32).
struct alignas(32) KTokenSums {
  int16_t sums[16];
};

inline size_t k_token_sums_bytes(int tokens, int64_t cols) { return tokens * (cols / 256) * sizeof(KTokenSums); }

template <bool kSubBlockSums>
void prepare_k_token_sums(const TileJob& job, int64_t t0, int mt, std::byte* work) {
  const int64_t blocks = job.w->cols / 256;
  for (int i = 0; i < mt; ++i) {
    auto* data = reinterpret_cast<KTokenSums*>(work) + i * blocks;
    const int16_t* bsums = job.act->group_sums(t0 + i);
    for (int64_t b = 0; b < blocks; ++b) {
      const int16_t* g = bsums + 16 * b;
      for (int j = 0; j < 16; ++j) {
        if constexpr (kSubBlockSums)
          data[b].sums[j] = j < 8 ? static_cast<int16_t>(g[2 * j] + g[2 * j + 1]) : int16_t{0};
        else
          data[b].sums[j] = static_cast<int16_t>(-g[j]);
      }
    }
  }
}

// The k-quant kernel of every SIMD ISA: a row's super-block is unpacked once (Format::unpack
// into Ops::Row) and dotted with each token of the tile by Ops::accumulate, which adds
// d_w * d_a * (integer sum) and, for Q4_K/Q5_K, -dmin_w * d_a * (min sum) to the accumulator.
template <class Format, class Ops>
struct KQuantTiles {
  using Block = typename Format::Block;
  static constexpr int kTokens = Ops::kTokens;
  static constexpr int kRows = Ops::kRows;

  static size_t work_bytes(int64_t cols) { return k_token_sums_bytes(kTokens, cols); }
  static void prepare(const TileJob& job, int64_t t0, int mt, std::byte* work) {
    prepare_k_token_sums<Format::kHasMin>(job, t0, mt, work);
  }

  template <int MT, int NR>
  static void tile(const TileJob& job, int64_t t0, int64_t n0, const std::byte* work) {
    const int64_t blocks = job.w->cols / 256;
    const auto* tokens = reinterpret_cast<const KTokenSums*>(work);
    const auto rows = weight_rows<Block, NR>(job, n0);
    typename Ops::Accumulator acc[MT][NR];
    for (int i = 0; i < MT; ++i)
      for (int r = 0; r < NR; ++r) acc[i][r] = Ops::zero();
    typename Ops::Row row;
    for (int64_t b = 0; b < blocks; ++b) {
      for (int r = 0; r < NR; ++r) {
        Format::unpack(rows[r][b], row);
        for (int i = 0; i < MT; ++i) {
          const int8_t* a = job.act->codes(t0 + i) + 256 * b;
          const float da = job.act->scales(t0 + i)[b];
          acc[i][r] = Ops::template accumulate<Format::kHasMin>(acc[i][r], row, a, tokens[i * blocks + b], da);
        }
      }
    }
    store_tile<MT, NR>(job, t0, n0, [&](int i, int r) { return Ops::reduce(acc[i][r]); });
  }
};

// The kernel table of one ISA. `Isa` names its kernels (Block32<Format>, KQuant<Format>,
// Float<Element>) and its formats (Q8_0 ... Q6_K, F32, F16, BF16).
template <class Isa>
struct KernelTable {
  template <class Kernel>
  static void run(const TileJob& job) {
    if constexpr (requires { Kernel::run(job); })
      Kernel::run(job);  // a kernel with its own walk
    else
      walk_tiles<Kernel>(job);
  }

  static TileKernel kernel_for(DType type) {
    switch (type) {
      case DType::F32: return &run<typename Isa::template Float<typename Isa::F32>>;
      case DType::F16: return &run<typename Isa::template Float<typename Isa::F16>>;
      case DType::BF16: return &run<typename Isa::template Float<typename Isa::BF16>>;
      case DType::Q8_0: return &run<typename Isa::template Block32<typename Isa::Q8_0>>;
      case DType::Q4_0: return &run<typename Isa::template Block32<typename Isa::Q4_0>>;
      case DType::Q4_1: return &run<typename Isa::template Block32<typename Isa::Q4_1>>;
      case DType::Q5_0: return &run<typename Isa::template Block32<typename Isa::Q5_0>>;
      case DType::Q5_1: return &run<typename Isa::template Block32<typename Isa::Q5_1>>;
      case DType::Q4_K: return &run<typename Isa::template KQuant<typename Isa::Q4_K>>;
      case DType::Q5_K: return &run<typename Isa::template KQuant<typename Isa::Q5_K>>;
      case DType::Q6_K: return &run<typename Isa::template KQuant<typename Isa::Q6_K>>;
      default: return nullptr;
    }
  }

  static size_t work_bytes(DType type, int64_t cols) {
    switch (dtype_info(type).block_size) {
      case 32: return Isa::template Block32<typename Isa::Q4_0>::work_bytes(cols);
      case 256: return Isa::template KQuant<typename Isa::Q4_K>::work_bytes(cols);
      default: return 0;
    }
  }

  static const KernelSet& set() {
    static const KernelSet kernels{&kernel_for, &work_bytes};
    return kernels;
  }
};

}  // namespace
}  // namespace cellm::cpu::detail
