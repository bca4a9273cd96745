// The AVX2 kernels (compiled with -mavx2 -mfma -mf16c, see src/backend/CMakeLists.txt) for
// x86-64 CPUs without AVX-512 VNNI. The structure follows matmul_avx512.cpp with 256-bit
// vectors: one 32-element block per chunk, vpmaddubsw + vpmaddwd for the integer dot products.
// vpmaddubsw saturates at 16 bits, so Q8_0 weights (up to 128 in magnitude) use the sign trick
// (|w| times a with w's sign) instead of an offset; the other formats' codes are small enough.
#include <immintrin.h>

#include <array>
#include <cstring>
#include <type_traits>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"
#include "gguf/quant_blocks.h"

namespace cellm::cpu::detail {
namespace {

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

float fp16(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of adjacent 16-bit pairs, widened to 32 bits: lane i covers elements 4i..4i+3.
__m256i widen_pairs(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// ---------------------------------------------------------------------------------------------
// 32-element block formats: codes() gives unsigned codes (value + kOffset) in element order.

__m256i nibbles(const uint8_t* qs) {
  const __m128i x = load128(qs);
  const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
  return _mm256_and_si256(y, _mm256_set1_epi8(0x0f));
}

// Bit j of qh becomes bit 4 of byte j.
__m256i fifth_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof qh);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

__m256i q8_0_codes(const BlockQ8_0& b) { return load256(b.qs); }

template <class Block>
__m256i q4_codes(const Block& b) {
  return nibbles(b.qs);
}

template <class Block>
__m256i q5_codes(const Block& b) {
  return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh));
}

template <class Format>
struct Block32Kernel {
  using Block = typename Format::Block;
  static constexpr int kTokens = 4;
  static constexpr int kRows = 2;
  // Q8_0 codes reach 128 in magnitude: vpmaddubsw would saturate with an offset.
  static constexpr bool kSigned = std::is_same_v<Block, BlockQ8_0>;

  // Per token and block: the offset correction (initial integer sums, per lane) or the Q8_1
  // block sum in lane 0.
  struct alignas(32) TokenBlock {
    __m256i extra;
  };

  static size_t work_bytes(int64_t cols) { return kTokens * (cols / 32) * sizeof(TokenBlock); }

  static void prepare(const TileJob& job, int64_t t0, int mt, std::byte* work) {
    if constexpr (Format::kOffset == 0 && !Format::kHasMin) return;
    const int64_t blocks = job.w->cols / 32;
    for (int i = 0; i < mt; ++i) {
      auto* data = reinterpret_cast<TokenBlock*>(work) + i * blocks;
      const int8_t* q = job.act->codes(t0 + i);
      for (int64_t b = 0; b < blocks; ++b) {
        if constexpr (Format::kOffset != 0) {
          const __m256i sums = widen_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(Format::kOffset), load256(q + 32 * b)));
          data[b].extra = _mm256_sub_epi32(_mm256_setzero_si256(), sums);
        } else {
          data[b].extra = _mm256_castps_si256(_mm256_zextps128_ps256(_mm_load_ss(job.act->sums(t0 + i) + b)));
        }
      }
    }
  }

  template <int MT, int NR>
  static void tile(const TileJob& job, int64_t t0, int64_t n0, const std::byte* work) {
    const int64_t blocks = job.w->cols / 32;
    const auto* tokens = reinterpret_cast<const TokenBlock*>(work);
    const auto rows = weight_rows<Block, NR>(job, n0);
    const int8_t* q[MT];
    const float* da[MT];
    for (int i = 0; i < MT; ++i) {
      q[i] = job.act->codes(t0 + i);
      da[i] = job.act->scales(t0 + i);
    }
    __m256 acc[MT][NR];
    for (int i = 0; i < MT; ++i)
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();

    // Row by row, so the weights are read as one sequential stream (see matmul_avx512.cpp).
    for (int r = 0; r < NR; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const Block& block = rows[r][b];
        const __m256i w = Format::unpack(block);
        const float wd = fp16(block.d);
        __m256i w_abs;
        if constexpr (kSigned) w_abs = _mm256_sign_epi8(w, w);
        __m256 wm;
        if constexpr (Format::kHasMin) wm = _mm256_set1_ps(fp16(block.m));
        for (int i = 0; i < MT; ++i) {
          const __m256i a = load256(q[i] + 32 * b);
          __m256i sums;
          if constexpr (kSigned) {
            sums = widen_pairs(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w)));
          } else {
            sums = widen_pairs(_mm256_maddubs_epi16(w, a));
            if constexpr (Format::kOffset != 0) sums = _mm256_add_epi32(sums, tokens[i * blocks + b].extra);
          }
          acc[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(wd * da[i][b]), acc[i][r]);
          if constexpr (Format::kHasMin)
            acc[i][r] = _mm256_fmadd_ps(wm, _mm256_castsi256_ps(tokens[i * blocks + b].extra), acc[i][r]);
        }
      }
    }
    store_tile<MT, NR>(job, t0, n0, [&](int i, int r) { return horizontal_sum(acc[i][r]); });
  }
};

// ---------------------------------------------------------------------------------------------
// k-quants: a row's super-block is unpacked into eight chunks of 32 codes with 16-bit scale
// vectors (kept in memory: sixteen 256-bit registers would not hold them).

struct KRow {
  __m256i q[8];
  __m256i scales[8];
  __m256i extra;  // Q4_K/Q5_K: the 8 mins (16-bit, low half); Q6_K: 32 x the 16 scales
  float d;
  float dmin;
};

template <class Block, bool kFifthBit>
void load_k_row(const Block& b, KRow& row) {
  const KScales k = unpack_k_scales(b.scales);
  uint8_t scales[8];
  std::memcpy(scales, &k.scales, 8);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int c = 0; c < 8; ++c) {
    const __m256i bytes = load256(b.qs + 32 * (c / 2));
    row.q[c] = _mm256_and_si256(c % 2 == 0 ? bytes : _mm256_srli_epi16(bytes, 4), low4);
    if constexpr (kFifthBit) {
      const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(load256(b.qh), c), _mm256_set1_epi8(1));
      row.q[c] = _mm256_or_si256(row.q[c], _mm256_slli_epi16(bit, 4));
    }
    row.scales[c] = _mm256_set1_epi16(scales[c]);
  }
  row.extra = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(k.mins))));
  row.d = fp16(b.d);
  row.dmin = fp16(b.dmin);
}

// Q6_K chunk c is elements 32c..32c+31: half c/4, quarter k = c%4 (see quant_blocks.h).
void load_q6_k_row(const BlockQ6_K& b, KRow& row) {
  const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
  for (int c = 0; c < 8; ++c) {
    const int h = c / 4;
    const int k = c % 4;
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(load256(b.ql + 64 * h + 32 * (k & 1)), 4 * (k / 2)),
                                         _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(load256(b.qh + 32 * h), 2 * k), _mm256_set1_epi8(3));
    row.q[c] = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
    row.scales[c] = _mm256_setr_m128i(_mm_set1_epi16(b.scales[2 * c]), _mm_set1_epi16(b.scales[2 * c + 1]));
  }
  row.extra = _mm256_slli_epi16(scales16, 5);
  row.d = fp16(b.d);
  row.dmin = 0.0f;
}

struct KQuantOps {
  static constexpr int kTokens = 4;
  static constexpr int kRows = 2;
  using Accumulator = __m256;
  using Row = KRow;
  static __m256 zero() { return _mm256_setzero_ps(); }
  static float reduce(__m256 acc) { return horizontal_sum(acc); }

  template <bool kHasMin>
  static __m256 accumulate(__m256 acc, const KRow& row, const int8_t* a, const KTokenSums& t, float da) {
    __m256i sums = _mm256_setzero_si256();
    if constexpr (!kHasMin) sums = _mm256_madd_epi16(row.extra, load256(t.sums));
    for (int c = 0; c < 8; ++c) {
      const __m256i products = _mm256_maddubs_epi16(row.q[c], load256(a + 32 * c));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(products, row.scales[c]));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(row.d * da), acc);
    if constexpr (kHasMin) {
      const __m128i min_sums = _mm_madd_epi16(_mm256_castsi256_si128(row.extra), load128(t.sums));
      acc = _mm256_fmadd_ps(_mm256_zextps128_ps256(_mm_cvtepi32_ps(min_sums)), _mm256_set1_ps(-(row.dmin * da)), acc);
    }
    return acc;
  }
};

// ---------------------------------------------------------------------------------------------
// Float weights: 8 lanes; the last partial vector is read through a zero-padded copy.

struct F32Format {
  using Element = float;
  static __m256 widen(const float* p) { return _mm256_loadu_ps(p); }
};

struct F16Format {
  using Element = uint16_t;
  static __m256 widen(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
};

struct BF16Format {
  using Element = uint16_t;
  static __m256 widen(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
};

template <class Format>
struct FloatKernel {
  using Element = typename Format::Element;
  static constexpr int kTokens = 4;
  static constexpr int kRows = 2;
  static size_t work_bytes(int64_t) { return 0; }
  static void prepare(const TileJob&, int64_t, int, std::byte*) {}

  template <int MT, int NR>
  static void tile(const TileJob& job, int64_t t0, int64_t n0, const std::byte*) {
    const int64_t cols = job.w->cols;
    const auto rows = weight_rows<Element, NR>(job, n0);
    const float* x[MT];
    for (int i = 0; i < MT; ++i) x[i] = job.x + (t0 + i) * job.x_stride;
    __m256 acc[MT][NR];
    for (int i = 0; i < MT; ++i)
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
    auto step = [&](auto load_w, auto load_x) {
      for (int r = 0; r < NR; ++r) {
        const __m256 w = load_w(r);
        for (int i = 0; i < MT; ++i) acc[i][r] = _mm256_fmadd_ps(w, load_x(i), acc[i][r]);
      }
    };
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8)
      step([&](int r) { return Format::widen(rows[r] + k); }, [&](int i) { return _mm256_loadu_ps(x[i] + k); });
    if (k < cols) {
      const int64_t rest = cols - k;
      step(
          [&](int r) {
            Element padded[8] = {};
            std::memcpy(padded, rows[r] + k, rest * sizeof(Element));
            return Format::widen(padded);
          },
          [&](int i) {
            float padded[8] = {};
            std::memcpy(padded, x[i] + k, rest * sizeof(float));
            return _mm256_loadu_ps(padded);
          });
    }
    store_tile<MT, NR>(job, t0, n0, [&](int i, int r) { return horizontal_sum(acc[i][r]); });
  }
};

// ---------------------------------------------------------------------------------------------

struct Avx2 {
  template <class Format>
  using Block32 = Block32Kernel<Format>;
  template <class Format>
  using KQuant = KQuantTiles<Format, KQuantOps>;
  template <class Element>
  using Float = FloatKernel<Element>;
  using Q8_0 = WeightFormat<BlockQ8_0, 0, false, &q8_0_codes>;
  using Q4_0 = WeightFormat<BlockQ4_0, 8, false, &q4_codes<BlockQ4_0>>;
  using Q4_1 = WeightFormat<BlockQ4_1, 0, true, &q4_codes<BlockQ4_1>>;
  using Q5_0 = WeightFormat<BlockQ5_0, 16, false, &q5_codes<BlockQ5_0>>;
  using Q5_1 = WeightFormat<BlockQ5_1, 0, true, &q5_codes<BlockQ5_1>>;
  using Q4_K = WeightFormat<BlockQ4_K, 0, true, &load_k_row<BlockQ4_K, false>>;
  using Q5_K = WeightFormat<BlockQ5_K, 0, true, &load_k_row<BlockQ5_K, true>>;
  using Q6_K = WeightFormat<BlockQ6_K, 0, false, &load_q6_k_row>;
  using F32 = F32Format;
  using F16 = F16Format;
  using BF16 = BF16Format;
};

}  // namespace

const KernelSet& avx2_kernels() { return KernelTable<Avx2>::set(); }

}  // namespace cellm::cpu::detail
