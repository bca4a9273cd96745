// AVX-512 kernels of the 32-element block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1); the scheme
// is described in matmul_avx512.cpp.
#include "backend/cpu/matmul_avx512_common.h"

namespace cellm::cpu::detail {
namespace {

// ---------------------------------------------------------------------------------------------
// 32-element block formats, four blocks (a group) at a time. Lanes 4k..4k+3 of a vector belong
// to block k of the group: the "front" vectors hold elements 0-15 of each block, the "back"
// vectors elements 16-31, so two vpdpbusd put 8 products of one block in every lane and one
// conversion and one multiply-add serve 128 weights. The nibble formats need no shuffle for
// this: low nibbles are the front, high nibbles the back.

struct GroupWeights {
  __m512i front;  // codes (value + kOffset) as unsigned bytes
  __m512i back;
  __m256 halves;  // [d0..d3, m0..m3] (m: Q4_1/Q5_1 offsets)
};

// The `bytes` (8, 16, 24 or 32) bytes at p with plain loads, zeros above. Masked loads are
// kept for partial groups only: when their masked-off part crosses a page, the processor
// takes a slow path, and full groups in decode hit that often.
template <int kBytes>
__m512i load_exact(const uint8_t* p) {
  static_assert(kBytes == 8 || kBytes == 16 || kBytes == 24 || kBytes == 32);
  if constexpr (kBytes == 8) return _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  if constexpr (kBytes == 16) return _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if constexpr (kBytes == 24) {
    const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i high = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16));
    return _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(low), high, 1));
  }
  if constexpr (kBytes == 32) return _mm512_castsi256_si512(load256(p));
}

// The nibble formats: up to four blocks (at most 96 bytes, every field 16-bit aligned) come in
// with two masked loads; two-table word permutations pull out the packed codes and fp16 fields.
// Blocks past `count` read as zeros. Always inlined, as q8_0_group: called through the format's
// function pointer, GCC kept both out of line, and their three-vector result went through
// memory on every group of every row (a fifth of a Gemma 3 decode step was these two calls).
template <class Block, int kQsWord, int kMinWord, int kQhWord>
[[gnu::always_inline]] inline GroupWeights nibble_group(const Block* b, int count) {
  constexpr int kWords = sizeof(Block) / 2;
  static constexpr std::array<int16_t, 32> kCodeIndex = [] {
    std::array<int16_t, 32> index{};  // [qs0, qs1, qs2, qs3]: 8 words each
    for (int j = 0; j < 32; ++j) index[j] = static_cast<int16_t>((j / 8) * kWords + kQsWord + j % 8);
    return index;
  }();
  // Words 0-3: d, 4-7: m, 8-11: low halves of qh (elements 0-15), 12-15: high halves.
  static constexpr std::array<int16_t, 32> kFieldIndex = [] {
    std::array<int16_t, 32> index{};
    for (int k = 0; k < 4; ++k) {
      index[k] = static_cast<int16_t>(k * kWords);
      index[4 + k] = static_cast<int16_t>(k * kWords + kMinWord);
      index[8 + k] = static_cast<int16_t>(k * kWords + std::max(kQhWord, 0));
      index[12 + k] = static_cast<int16_t>(k * kWords + std::max(kQhWord, 0) + 1);
    }
    return index;
  }();
  const int64_t bytes = count * static_cast<int64_t>(sizeof(Block));
  const auto* p = reinterpret_cast<const uint8_t*>(b);
  __m512i lo;
  __m512i hi;
  if (count == 4) {
    lo = load512(p);
    hi = load_exact<4 * sizeof(Block) - 64>(p + 64);
  } else {
    lo = _mm512_maskz_loadu_epi8(byte_mask(bytes), p);
    hi = _mm512_maskz_loadu_epi8(byte_mask(bytes - 64), p + 64);
  }
  const __m512i packed = _mm512_permutex2var_epi16(lo, _mm512_loadu_si512(kCodeIndex.data()), hi);
  const __m512i fields = _mm512_permutex2var_epi16(lo, _mm512_loadu_si512(kFieldIndex.data()), hi);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  GroupWeights g;
  g.front = _mm512_and_si512(packed, low4);
  g.back = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
  if constexpr (kQhWord >= 0) {
    const __m128i qh = _mm256_extracti128_si256(_mm512_castsi512_si256(fields), 1);
    const __m512i sixteen = _mm512_set1_epi8(16);
    g.front = _mm512_mask_add_epi8(g.front, _mm_cvtsi128_si64(qh), g.front, sixteen);
    g.back = _mm512_mask_add_epi8(g.back, _mm_extract_epi64(qh, 1), g.back, sixteen);
  }
  g.halves = _mm256_cvtph_ps(_mm512_castsi512_si128(fields));
  return g;
}

// Q8_0: four blocks are 136 bytes. Word w of the group is word w % 32 of load w / 32; the
// last block's back half straddles the second and third loads.
[[gnu::always_inline]] inline GroupWeights q8_0_group(const BlockQ8_0* b, int count) {
  constexpr int kWords = sizeof(BlockQ8_0) / 2;  // 17: d, then 16 words of codes
  static constexpr std::array<std::array<int16_t, 32>, 3> kIndex = [] {
    std::array<std::array<int16_t, 32>, 3> index{};  // front (loads 0-1), back (0-1), back (1-2)
    for (int j = 0; j < 32; ++j) {
      const int k = j / 8;
      index[0][j] = static_cast<int16_t>(k * kWords + 1 + j % 8);
      index[1][j] = static_cast<int16_t>(k * kWords + 9 + j % 8);
      index[2][j] = static_cast<int16_t>(k * kWords + 9 + j % 8 - 32);
    }
    return index;
  }();
  static constexpr std::array<int16_t, 32> kScaleIndex = {0, kWords, 2 * kWords, 3 * kWords};
  const int64_t bytes = count * static_cast<int64_t>(sizeof(BlockQ8_0));
  const auto* p = reinterpret_cast<const uint8_t*>(b);
  __m512i l0;
  __m512i l1;
  __m512i l2;
  if (count == 4) {
    l0 = load512(p);
    l1 = load512(p + 64);
    l2 = load_exact<8>(p + 128);
  } else {
    l0 = _mm512_maskz_loadu_epi8(byte_mask(bytes), p);
    l1 = _mm512_maskz_loadu_epi8(byte_mask(bytes - 64), p + 64);
    l2 = _mm512_maskz_loadu_epi8(byte_mask(bytes - 128), p + 128);
  }
  const __m512i front = _mm512_permutex2var_epi16(l0, _mm512_loadu_si512(kIndex[0].data()), l1);
  const __m512i back = _mm512_mask_blend_epi16(0xff000000u,  // words 24-31: the last block
                                               _mm512_permutex2var_epi16(l0, _mm512_loadu_si512(kIndex[1].data()), l1),
                                               _mm512_permutex2var_epi16(l1, _mm512_loadu_si512(kIndex[2].data()), l2));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i scales = _mm512_permutex2var_epi16(l0, _mm512_loadu_si512(kScaleIndex.data()), l1);
  return {_mm512_xor_si512(front, flip), _mm512_xor_si512(back, flip),
          _mm256_castps128_ps256(_mm_cvtph_ps(_mm512_castsi512_si128(scales)))};
}

// [v[first] x 4, v[first+1] x 4, v[first+2] x 4, v[first+3] x 4]: one value per block.
__m512 spread4(__m256 v, int first) {
  return _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                                _mm512_set1_epi32(first)),
                               _mm512_castps256_ps512(v));
}

// The token side of the decode path: per token and group, the activation codes in the
// front/back order of GroupWeights, minus the offset times the activation sums per lane (the
// initial integer sums), and the block scales and Q8_1 sums spread over their blocks' lanes.
template <class Format>
struct Block32Tokens {
  static constexpr int kTokens = 4;

  struct alignas(64) TokenGroup {
    __m512i front;
    __m512i back;
    __m512i init;
    __m512 scale;
    __m512 sums;
  };

  static int64_t groups(int64_t cols) { return (cols / 32 + 3) / 4; }
  static size_t work_bytes(int64_t cols) { return kTokens * groups(cols) * sizeof(TokenGroup); }

  static void prepare(const TileJob& job, int64_t t0, int mt, std::byte* work) {
    const int64_t blocks = job.w->cols / 32;
    const int64_t n_groups = groups(job.w->cols);
    for (int i = 0; i < mt; ++i) {
      auto* data = reinterpret_cast<TokenGroup*>(work) + i * n_groups;
      const int8_t* q = job.act->codes(t0 + i);
      for (int64_t g = 0; g < n_groups; ++g) {
        const int64_t count = std::min<int64_t>(4, blocks - 4 * g);
        const __m512i x0 = _mm512_maskz_loadu_epi8(byte_mask(32 * count), q + 128 * g);
        const __m512i x1 = _mm512_maskz_loadu_epi8(byte_mask(32 * count - 64), q + 128 * g + 64);
        data[g].front = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(2, 0, 2, 0));
        data[g].back = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 1, 3, 1));
        const __m512i offset = _mm512_set1_epi8(static_cast<char>(Format::kOffset));
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, data[g].front),
                                                 offset, data[g].back);
        data[g].init = _mm512_sub_epi32(_mm512_setzero_si512(), sums);
        const auto in_group = static_cast<__mmask8>((1u << count) - 1);
        data[g].scale = spread4(_mm256_maskz_loadu_ps(in_group, job.act->scales(t0 + i) + 4 * g), 0);
        if constexpr (Format::kHasMin)
          data[g].sums = spread4(_mm256_maskz_loadu_ps(in_group, job.act->sums(t0 + i) + 4 * g), 0);
      }
    }
  }
};

// The per-output sequence: four float accumulators per output, one per block position in a
// group (block b goes to accumulator b % 4), each taking fma(float(exact block sum), d_w * d_a)
// (then fma(m_w, s_a) for Q4_1/Q5_1) block after block; the output is (a0 + a1) + (a2 + a3).
//  - Prefill repacks 16 rows into panels where vector w of a block holds its elements
//    4w..4w+3 of all 16 rows: eight vpdpbusd with broadcast activation words give each lane
//    its row's whole block sum, and one conversion and multiply-add serve 16 outputs.
//  - Decode (few tokens) reads each row once in GroupWeights order: lanes 4k..4k+3 hold block
//    k's partial sums; two shuffles make every lane of the four its block's exact sum, so the
//    16-lane accumulator holds the four accumulators, each four times, and no repacking or
//    transposing is needed.
struct alignas(64) BlockPanel {  // four blocks (a group) of 16 rows
  __m512i codes[4][8];           // [block][word], lane r: row r's codes, unsigned
  float d[4][16];                // [block][row]
  float m[4][16];                // Q4_1/Q5_1 offsets
};

template <class Format>
struct Block32Panels {
  using Block = typename Format::Block;
  using Tokens = Block32Tokens<Format>;
  static constexpr int kTokens = 4;

  struct Layout {  // the work area
    BlockPanel* panels;
    int32_t* init;  // [token][block]: minus offset times the block's code sum
    typename Tokens::TokenGroup* groups;
    int64_t blocks, padded;  // padded: blocks rounded up to 16
  };

  static int64_t groups(int64_t cols) { return (cols / 32 + 3) / 4; }
  static Layout layout(std::byte* work, int64_t cols) {
    Layout l;
    l.blocks = cols / 32;
    l.padded = (l.blocks + 15) / 16 * 16;
    auto* p = work;
    l.panels = reinterpret_cast<BlockPanel*>(p);
    p += groups(cols) * sizeof(BlockPanel);
    l.groups = reinterpret_cast<typename Tokens::TokenGroup*>(p);
    p += Tokens::work_bytes(cols);
    l.init = reinterpret_cast<int32_t*>(p);
    return l;
  }
  static size_t work_bytes(int64_t cols) {
    const int64_t padded = (cols / 32 + 15) / 16 * 16;
    return groups(cols) * sizeof(BlockPanel) + Tokens::work_bytes(cols) + kMaxJobTokens * padded * 4;
  }

  static void repack(const TileJob& job, int64_t n0, int nr, const Layout& l) {
    const auto rows = weight_rows<Block, kPanelRows>(job, n0);
    for (int64_t g = 0; g < groups(job.w->cols); ++g) {
      const int count = static_cast<int>(std::min<int64_t>(4, l.blocks - 4 * g));
      BlockPanel& p = l.panels[g];
      __m512i front[kPanelRows];
      __m512i back[kPanelRows];
      for (int r = 0; r < kPanelRows; ++r) {
        if (r >= nr) {
          front[r] = back[r] = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) p.d[k][r] = p.m[k][r] = 0.0f;
          continue;
        }
        const GroupWeights w = Format::unpack(rows[r] + 4 * g, count);
        front[r] = w.front;
        back[r] = w.back;
        alignas(32) float halves[8];
        _mm256_store_ps(halves, w.halves);
        for (int k = 0; k < 4; ++k) {
          p.d[k][r] = halves[k];
          p.m[k][r] = halves[4 + k];
        }
      }
      transpose16(front);  // front[4k + j]: block k, elements 4j..4j+3
      transpose16(back);   // back[4k + j]: block k, elements 16 + 4j..
      for (int k = 0; k < 4; ++k) {
        for (int j = 0; j < 4; ++j) {
          p.codes[k][j] = front[4 * k + j];
          p.codes[k][4 + j] = back[4 * k + j];
        }
      }
    }
  }

  static void prepare_init(const TileJob& job, const Layout& l) {
    if constexpr (Format::kOffset != 0) {
      for (int64_t t = job.t_begin; t < job.t_end; ++t) {
        const int8_t* q = job.act->codes(t);
        int32_t* init = l.init + (t - job.t_begin) * l.padded;
        for (int64_t b = 0; b < l.blocks; ++b) {
          const __m256i codes = load256(q + 32 * b);
          const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), codes), _mm256_set1_epi16(1));
          __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
          s4 = _mm_hadd_epi32(s4, s4);
          s4 = _mm_hadd_epi32(s4, s4);
          init[b] = -Format::kOffset * _mm_cvtsi128_si32(s4);
        }
      }
    }
  }

  template <int MT>
  static void tile(const TileJob& job, const Layout& l, int64_t t0, int64_t n0, int nr) {
    __m512 acc[MT][4];
    for (auto& per_token : acc)
      for (auto& a : per_token) a = _mm512_setzero_ps();
    for (int64_t b = 0; b < l.blocks; ++b) {
      const BlockPanel& p = l.panels[b / 4];
      const int k = static_cast<int>(b % 4);
      const __m512 d = _mm512_load_ps(p.d[k]);
      for (int i = 0; i < MT; ++i) {
        const int8_t* a = job.act->codes(t0 + i) + 32 * b;
        __m512i sums = Format::kOffset != 0 ? _mm512_set1_epi32(l.init[(t0 + i - job.t_begin) * l.padded + b])
                                            : _mm512_setzero_si512();
        for (int w = 0; w < 8; ++w) sums = _mm512_dpbusd_epi32(sums, p.codes[k][w], _mm512_set1_epi32(load_word(a + 4 * w)));
        __m512& out = acc[i][k];
        out = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(d, _mm512_set1_ps(job.act->scales(t0 + i)[b])), out);
        if constexpr (Format::kHasMin) out = _mm512_fmadd_ps(_mm512_load_ps(p.m[k]), _mm512_set1_ps(job.act->sums(t0 + i)[b]), out);
      }
    }
    for (int i = 0; i < MT; ++i)
      store_lanes(job, _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3])), t0 + i, n0, nr);
  }

  // Decode: row by row in memory order; see the comment above the panel layout. The token
  // count is a template argument so that the accumulators stay in registers: indexed by a
  // run-time count they lived on the stack, and every group's multiply-add waited for the
  // previous one's store (a third of Gemma 3's Q5_0 products, perf).
  static void run_rows(const TileJob& job, const Layout& l) {
    switch (job.t_end - job.t_begin) {
      case 1: return rows_of<1>(job, l);
      case 2: return rows_of<2>(job, l);
      default: return rows_of<3>(job, l);  // fewer than kTokens
    }
  }

  template <int tokens>
  static void rows_of(const TileJob& job, const Layout& l) {
    static_assert(tokens < kTokens);
    const int64_t n_groups = groups(job.w->cols);
    Tokens::prepare(job, job.t_begin, tokens, reinterpret_cast<std::byte*>(l.groups));
    const auto* base = static_cast<const std::byte*>(job.w->data);
    for (int64_t n = job.n_begin; n < job.n_end; ++n) {
      const auto* row = reinterpret_cast<const Block*>(base + n * job.w->row_bytes);
      __m512 acc[tokens];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t g = 0; g < n_groups; ++g) {
        const GroupWeights w = Format::unpack(row + 4 * g, static_cast<int>(std::min<int64_t>(4, l.blocks - 4 * g)));
        const __m512 d = spread4(w.halves, 0);
        __m512 m;
        if constexpr (Format::kHasMin) m = spread4(w.halves, 4);
        for (int i = 0; i < tokens; ++i) {
          const auto& t = l.groups[i * n_groups + g];
          __m512i v = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(t.init, w.front, t.front), w.back, t.back);
          v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
          v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));  // lanes 4k..4k+3: block k's sum
          acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(d, t.scale), acc[i]);
          if constexpr (Format::kHasMin) acc[i] = _mm512_fmadd_ps(m, t.sums, acc[i]);
        }
      }
      for (int i = 0; i < tokens; ++i) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, acc[i]);
        const float v = (lanes[0] + lanes[4]) + (lanes[8] + lanes[12]);
        job.out[(job.t_begin + i) * job.out_stride + n] = job.bias ? v + job.bias[n] : v;
      }
    }
  }

  static void run(const TileJob& job) {
    const Layout l = layout(job.work, job.w->cols);
    if (job.t_end - job.t_begin < kTokens) return run_rows(job, l);
    prepare_init(job, l);
    for (int64_t n0 = job.n_begin; n0 < job.n_end; n0 += kPanelRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, job.n_end - n0));
      repack(job, n0, nr, l);
      for (int64_t t0 = job.t_begin; t0 < job.t_end; t0 += kTokens) {
        switch (std::min<int64_t>(kTokens, job.t_end - t0)) {
          case 1: tile<1>(job, l, t0, n0, nr); break;
          case 2: tile<2>(job, l, t0, n0, nr); break;
          case 3: tile<3>(job, l, t0, n0, nr); break;
          default: tile<4>(job, l, t0, n0, nr); break;
        }
      }
    }
  }
};

template <class Block, int kOffset, bool kHasMin, auto kUnpack>
TileKernel panels() {
  return &Block32Panels<WeightFormat<Block, kOffset, kHasMin, kUnpack>>::run;
}

}  // namespace

TileKernel avx512_block32_kernel(DType type) {
  switch (type) {
    case DType::Q8_0: return panels<BlockQ8_0, 128, false, &q8_0_group>();
    case DType::Q4_0: return panels<BlockQ4_0, 8, false, &nibble_group<BlockQ4_0, 1, 0, -1>>();
    case DType::Q4_1: return panels<BlockQ4_1, 0, true, &nibble_group<BlockQ4_1, 2, 1, -1>>();
    case DType::Q5_0: return panels<BlockQ5_0, 16, false, &nibble_group<BlockQ5_0, 3, 0, 1>>();
    case DType::Q5_1: return panels<BlockQ5_1, 0, true, &nibble_group<BlockQ5_1, 4, 1, 2>>();
    default: return nullptr;
  }
}

size_t avx512_block32_work_bytes(int64_t cols) {
  return Block32Panels<WeightFormat<BlockQ4_0, 8, false, &nibble_group<BlockQ4_0, 1, 0, -1>>>::work_bytes(cols);
}

}  // namespace cellm::cpu::detail
