// AVX-512 kernels of the k-quants (Q4_K, Q5_K, Q6_K); the scheme is described in
// matmul_avx512.cpp.
#include "backend/cpu/matmul_avx512_common.h"

namespace cellm::cpu::detail {
namespace {

// ---------------------------------------------------------------------------------------------
// k-quants, one weight row per lane. A job repacks 16 rows at a time into panels (one per
// super-block) where vector w holds elements 4w..4w+3 of all 16 rows; a broadcast activation
// word then feeds vpdpbusd for 16 rows at once, the sub-block scales are per-lane integer
// multiplies, and the float work (d * d_a * sum, then the mins or nothing) is done once per
// super-block for 16 outputs with no horizontal reduction. The repacking is paid once per job
// and reused by all its tokens.

struct alignas(64) KPanel {
  __m512i codes[64];       // codes[w], lane r: elements 4w..4w+3 of row r (unsigned)
  int32_t scales[16][16];  // [group][row]: Q4_K/Q5_K the 8 sub-block scales; Q6_K the 16 scales
  int16_t pairs[8][32];    // [j][2 row + k]: Q4_K/Q5_K min m_{2j+k}; Q6_K -32 * scale_{2j+k}
  float d[16];
  float dmin[16];
};

// Q4_K and Q5_K: the 256 codes of a super-block in element order (sub-block 2c in the low
// nibbles of qs[32c..32c+31], 2c+1 in the high ones); k_fields puts its scales in lane r.
template <class Block, bool kFifthBit>
void k_codes(const Block& b, __m512i q[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i high_bits;
  if constexpr (kFifthBit) high_bits = _mm512_broadcast_i64x4(load256(b.qh));
  for (int c = 0; c < 4; ++c) {
    const __m256i y = load256(b.qs + 32 * c);
    q[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(y), _mm256_srli_epi16(y, 4), 1), low4);
    if constexpr (kFifthBit) {
      const __m512i select = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                                _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
      q[c] = _mm512_mask_add_epi8(q[c], _mm512_test_epi8_mask(high_bits, select), q[c], _mm512_set1_epi8(16));
    }
  }
}

template <class Block>
void k_fields(const Block& b, KPanel& p, int r) {
  const KScales k = unpack_k_scales(b.scales);
  for (int s = 0; s < 8; ++s) {
    p.scales[s][r] = static_cast<int32_t>((k.scales >> (8 * s)) & 0xff);
    p.pairs[s / 2][2 * r + s % 2] = static_cast<int16_t>((k.mins >> (8 * s)) & 0xff);
  }
  p.d[r] = fp16_value(b.d);
  p.dmin[r] = fp16_value(b.dmin);
}

// Q6_K: half h has ql[64h..64h+63] and qh[32h..32h+31]; its first 64 codes take the low
// nibbles with qh bits 0-1 (elements 0-31) and 2-3 (32-63), the next 64 the high nibbles
// with bits 4-7.
void q6_k_codes(const BlockQ6_K& b, __m512i q[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i high2 = _mm512_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = load512(b.ql + 64 * h);
    const __m256i qh = load256(b.qh + 32 * h);
    const __m512i qh_a = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i qh_b = _mm512_srli_epi16(qh_a, 4);
    // (low & 0x0f) | ((high << 4) & 0x30): ternary logic A | (B & C) is 0xf8.
    q[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4), _mm512_slli_epi16(qh_a, 4), high2, 0xf8);
    q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                             _mm512_slli_epi16(qh_b, 4), high2, 0xf8);
  }
}

void q6_k_fields(const BlockQ6_K& b, KPanel& p, int r) {
  for (int g = 0; g < 16; ++g) {
    p.scales[g][r] = b.scales[g];
    p.pairs[g / 2][2 * r + g % 2] = static_cast<int16_t>(-32 * b.scales[g]);
  }
  p.d[r] = fp16_value(b.d);
  p.dmin[r] = 0.0f;
}

// A row's codes, and its fields into lane r of a panel.
template <class Block, bool kFifthBit>
void k_row(const Block& b, __m512i q[4], KPanel& p, int r) {
  k_codes<Block, kFifthBit>(b, q);
  k_fields(b, p, r);
}

void q6_k_row(const BlockQ6_K& b, __m512i q[4], KPanel& p, int r) {
  q6_k_codes(b, q);
  q6_k_fields(b, p, r);
}

// The same sums for jobs of few tokens, where repacking would cost more than it saves: a row's
// super-block is unpacked in element order (4 x 64 codes with 16-bit scale vectors) and its
// integer sums reduced exactly, so the float steps, done per row, round exactly as a panel
// lane's do.
struct KRow {
  __m512i q[4];
  __m512i scales[4];  // per maddubs pair
  __m512i extra;      // Q4_K/Q5_K: the 8 mins (16-bit); Q6_K: -32 x the 16 scales (16-bit)
  float d;
  float dmin;
};

template <int kPer, int kFirst>
__m512i scale_chunk(__m512i scales16) {
  static constexpr std::array<int16_t, 32> kIndex = [] {
    std::array<int16_t, 32> index{};
    for (int j = 0; j < 32; ++j) index[j] = static_cast<int16_t>(kFirst + j / kPer);
    return index;
  }();
  return _mm512_permutexvar_epi16(_mm512_loadu_si512(kIndex.data()), scales16);
}

template <class Block>
void load_row(const Block& b, KRow& row) {
  if constexpr (std::is_same_v<Block, BlockQ6_K>) {
    q6_k_codes(b, row.q);
    const __m512i scales16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales))));
    row.scales[0] = scale_chunk<8, 0>(scales16);
    row.scales[1] = scale_chunk<8, 4>(scales16);
    row.scales[2] = scale_chunk<8, 8>(scales16);
    row.scales[3] = scale_chunk<8, 12>(scales16);
    row.extra = _mm512_zextsi256_si512(_mm256_mullo_epi16(_mm512_castsi512_si256(scales16), _mm256_set1_epi16(-32)));
    row.d = fp16_value(b.d);
    row.dmin = 0.0f;
  } else {
    k_codes<Block, std::is_same_v<Block, BlockQ5_K>>(b, row.q);
    const KScales k = unpack_k_scales(b.scales);
    const __m512i scales16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(k.scales))));
    row.scales[0] = scale_chunk<16, 0>(scales16);
    row.scales[1] = scale_chunk<16, 2>(scales16);
    row.scales[2] = scale_chunk<16, 4>(scales16);
    row.scales[3] = scale_chunk<16, 6>(scales16);
    row.extra = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(k.mins))));
    const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(b.d | static_cast<uint32_t>(b.dmin) << 16)));
    row.d = _mm_cvtss_f32(both);
    row.dmin = _mm_cvtss_f32(_mm_movehdup_ps(both));
  }
}

template <class Format>
struct KQuantKernel {
  using Block = typename Format::Block;
  static constexpr int kTokens = 4;
  static constexpr int kGroups = Format::kHasMin ? 8 : 16;  // scales per super-block
  static constexpr int kPairs = Format::kHasMin ? 4 : 8;    // 16-bit pairs of pair terms

  static size_t panel_bytes(int64_t cols) { return (cols / 256) * sizeof(KPanel); }
  static size_t work_bytes(int64_t cols) { return panel_bytes(cols) + k_token_sums_bytes(kMaxJobTokens, cols); }

  static void repack(const TileJob& job, int64_t n0, int nr, KPanel* panels) {
    const auto rows = weight_rows<Block, kPanelRows>(job, n0);
    __m512i codes[kPanelRows][4];
    for (int64_t b = 0; b < job.w->cols / 256; ++b) {
      KPanel& p = panels[b];
      for (int r = 0; r < kPanelRows; ++r) {
        if (r < nr) {
          Format::unpack(rows[r][b], codes[r], p, r);
          continue;
        }
        for (auto& c : codes[r]) c = _mm512_setzero_si512();
        for (auto& g : p.scales) g[r] = 0;
        for (auto& j : p.pairs) j[2 * r] = j[2 * r + 1] = 0;
        p.d[r] = p.dmin[r] = 0.0f;
      }
      for (int c = 0; c < 4; ++c) {
        __m512i m[kPanelRows];
        for (int r = 0; r < kPanelRows; ++r) m[r] = codes[r][c];
        transpose16(m);
        for (int k = 0; k < 16; ++k) p.codes[16 * c + k] = m[k];
      }
    }
  }

  // Tokens t0..t0+MT-1 against a panel row group; `sums` are the job's Q4_K/Q5_K token sums.
  template <int MT>
  static void tile(const TileJob& job, const KPanel* panels, const KTokenSums* sums, int64_t t0, int64_t n0, int nr) {
    constexpr int kWords = 64 / kGroups;
    const int64_t blocks = job.w->cols / 256;
    __m512 acc[MT];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const KPanel& p = panels[b];
      const int8_t* a[MT];
      for (int i = 0; i < MT; ++i) a[i] = job.act->codes(t0 + i) + 256 * b;
      __m512i isum[MT];
      __m512i msum[MT];
      for (int i = 0; i < MT; ++i) isum[i] = msum[i] = _mm512_setzero_si512();
      for (int g = 0; g < kGroups; ++g) {
        __m512i part[MT];
        for (auto& v : part) v = _mm512_setzero_si512();
        for (int w = g * kWords; w < (g + 1) * kWords; ++w)
          for (int i = 0; i < MT; ++i)
            part[i] = _mm512_dpbusd_epi32(part[i], p.codes[w], _mm512_set1_epi32(load_word(a[i] + 4 * w)));
        const __m512i scale = _mm512_load_si512(p.scales[g]);
        for (int i = 0; i < MT; ++i) isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(part[i], scale));
      }
      for (int j = 0; j < kPairs; ++j) {
        const __m512i pair = _mm512_load_si512(p.pairs[j]);
        for (int i = 0; i < MT; ++i) {
          if constexpr (Format::kHasMin) {
            const int16_t* s = sums[(t0 + i - job.t_begin) * blocks + b].sums + 2 * j;
            msum[i] = _mm512_dpwssd_epi32(msum[i], pair, _mm512_set1_epi32(load_word(s)));
          } else {
            const int16_t* s = job.act->group_sums(t0 + i) + 16 * b + 2 * j;
            isum[i] = _mm512_dpwssd_epi32(isum[i], pair, _mm512_set1_epi32(load_word(s)));
          }
        }
      }
      const __m512 d = _mm512_load_ps(p.d);
      for (int i = 0; i < MT; ++i) {
        const float da = job.act->scales(t0 + i)[b];
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, _mm512_set1_ps(da)), acc[i]);
        if constexpr (Format::kHasMin)
          acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum[i]), _mm512_mul_ps(_mm512_load_ps(p.dmin), _mm512_set1_ps(-da)),
                                   acc[i]);
      }
    }
    for (int i = 0; i < MT; ++i) store_lanes(job, acc[i], t0 + i, n0, nr);
  }

  // One super-block column of a 16-row group: each row's exact integer sums for the job's
  // tokens, and its scales.
  struct alignas(64) BlockSums {
    int32_t sums[kTokens][kPanelRows];
    int32_t min_sums[kTokens][kPanelRows];
    float d[kPanelRows];
    float dmin[kPanelRows];
  };
  static_assert(sizeof(BlockSums) <= sizeof(KPanel));  // they live in the panels' work area

  // Few tokens: 16 rows at a time. Each row's integer sums, block by block in memory order (a
  // stream the hardware prefetcher follows: visiting the 16 rows a block at a time, 16 short
  // strides, left four fifths of the time on the first load of each block, perf), computed in
  // element order and reduced exactly; then, block by block, the float steps of tile() with one
  // row per lane.
  static void run_rows(const TileJob& job) {
    const int64_t blocks = job.w->cols / 256;
    const int tokens = static_cast<int>(job.t_end - job.t_begin);
    auto* columns = reinterpret_cast<BlockSums*>(job.work);
    KRow row;
    for (int64_t n0 = job.n_begin; n0 < job.n_end; n0 += kPanelRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, job.n_end - n0));
      const auto rows = weight_rows<Block, kPanelRows>(job, n0);
      for (int r = 0; r < kPanelRows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
          BlockSums& c = columns[b];
          if (r >= nr) {  // lanes past the matrix: zeros, unstored
            for (int i = 0; i < kTokens; ++i) c.sums[i][r] = c.min_sums[i][r] = 0;
            c.d[r] = c.dmin[r] = 0.0f;
            continue;
          }
          load_row(rows[r][b], row);
          c.d[r] = row.d;
          c.dmin[r] = row.dmin;
          for (int i = 0; i < tokens; ++i) row_sums(row, job, job.t_begin + i, b, c.sums[i][r], c.min_sums[i][r]);
        }
      }
      __m512 acc[kTokens];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t b = 0; b < blocks; ++b) {
        const BlockSums& c = columns[b];
        for (int i = 0; i < tokens; ++i) {
          const __m512 da = _mm512_set1_ps(job.act->scales(job.t_begin + i)[b]);
          acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c.sums[i])), _mm512_mul_ps(_mm512_load_ps(c.d), da), acc[i]);
          if constexpr (Format::kHasMin)
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c.min_sums[i])),
                                     _mm512_mul_ps(_mm512_load_ps(c.dmin), _mm512_set1_ps(-job.act->scales(job.t_begin + i)[b])),
                                     acc[i]);
        }
      }
      for (int i = 0; i < tokens; ++i) store_lanes(job, acc[i], job.t_begin + i, n0, nr);
    }
  }

  static void row_sums(const KRow& row, const TileJob& job, int64_t t, int64_t b, int32_t& sum, int32_t& min_sum) {
    const int8_t* a = job.act->codes(t) + 256 * b;
    const int16_t* g = job.act->group_sums(t) + 16 * b;
    __m512i even = _mm512_setzero_si512();
    __m512i odd = _mm512_setzero_si512();
    for (int c = 0; c < 4; c += 2) {
      even = _mm512_dpwssd_epi32(even, _mm512_maddubs_epi16(row.q[c], load512(a + 64 * c)), row.scales[c]);
      odd = _mm512_dpwssd_epi32(odd, _mm512_maddubs_epi16(row.q[c + 1], load512(a + 64 * c + 64)), row.scales[c + 1]);
    }
    if constexpr (!Format::kHasMin) even = _mm512_dpwssd_epi32(even, row.extra, _mm512_zextsi256_si512(load256(g)));
    const __m512i total = _mm512_add_epi32(even, odd);
    const __m256i eight = _mm256_add_epi32(_mm512_castsi512_si256(total), _mm512_extracti64x4_epi64(total, 1));
    const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(eight), _mm256_extracti128_si256(eight, 1));
    __m128i mins = _mm_setzero_si128();
    if constexpr (Format::kHasMin) {
      const __m128i group_pairs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)),
                                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 8)));
      mins = _mm_madd_epi16(_mm512_castsi512_si128(row.extra), group_pairs);
    }
    __m128i both = _mm_hadd_epi32(four, mins);  // [sum, sum, min, min] partials
    both = _mm_hadd_epi32(both, both);            // lane 0: the sum, lane 1: the min sum
    sum = _mm_cvtsi128_si32(both);
    min_sum = _mm_extract_epi32(both, 1);
  }

  static void run(const TileJob& job) {
    if (job.t_end - job.t_begin < kTokens) return run_rows(job);
    auto* panels = reinterpret_cast<KPanel*>(job.work);
    auto* sums = reinterpret_cast<KTokenSums*>(job.work + panel_bytes(job.w->cols));
    if constexpr (Format::kHasMin)
      prepare_k_token_sums<true>(job, job.t_begin, static_cast<int>(job.t_end - job.t_begin), job.work + panel_bytes(job.w->cols));
    for (int64_t n0 = job.n_begin; n0 < job.n_end; n0 += kPanelRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, job.n_end - n0));
      repack(job, n0, nr, panels);
      for (int64_t t0 = job.t_begin; t0 < job.t_end; t0 += kTokens) {
        switch (std::min<int64_t>(kTokens, job.t_end - t0)) {
          case 1: tile<1>(job, panels, sums, t0, n0, nr); break;
          case 2: tile<2>(job, panels, sums, t0, n0, nr); break;
          case 3: tile<3>(job, panels, sums, t0, n0, nr); break;
          default: tile<4>(job, panels, sums, t0, n0, nr); break;
        }
      }
    }
  }
};

template <class Block, bool kHasMin, auto kUnpack>
TileKernel kernel() {
  return &KQuantKernel<WeightFormat<Block, 0, kHasMin, kUnpack>>::run;
}

}  // namespace

TileKernel avx512_kquant_kernel(DType type) {
  switch (type) {
    case DType::Q4_K: return kernel<BlockQ4_K, true, &k_row<BlockQ4_K, false>>();
    case DType::Q5_K: return kernel<BlockQ5_K, true, &k_row<BlockQ5_K, true>>();
    case DType::Q6_K: return kernel<BlockQ6_K, false, &q6_k_row>();
    default: return nullptr;
  }
}

size_t avx512_kquant_work_bytes(int64_t cols) {
  return KQuantKernel<WeightFormat<BlockQ4_K, 0, true, &k_row<BlockQ4_K, false>>>::work_bytes(cols);
}

}  // namespace cellm::cpu::detail
