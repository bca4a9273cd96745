// The exact product of quantized weights with quantized activations for many activation rows
// (prefill), on the int8 tensor cores. A block of 8 warps owns 64 weight rows x 64 activation
// rows and walks K in steps of 256 elements (eight 32-element blocks, or one super-block):
//  1. the step's raw weight bytes (the 16-byte chunks around them) and activation codes come
//     to shared memory with cp.async; the weights are decoded there to int8 rows with the
//     GEMV's decoders (weight_units_int8.cuh), block scales and activation scales beside them;
//  2. each warp multiplies 16 weight rows by 32 activation rows with mma.sync m16n8k32 (k16
//     for Q6_K's 16-element scale groups): per 32-element block (per sub-block or group for
//     the k-quants) the exact integer sums of the contract;
//  3. the float steps are the contract's, per output in block order, as in the GEMV
//     (matmul_kernels.h), so an output is bit-identical whichever kernel computed it.
#include <algorithm>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/kernel_launch.cuh"
#include "backend/cuda/weight_units_int8.cuh"
#include "core/error.h"

namespace cellm::cuda {
namespace {

using namespace exact;

constexpr int kRows = 64;     // weight rows per block
constexpr int kTokens = 64;   // activation rows per block
constexpr int kStepElems = 256;
constexpr int kTileStride = kStepElems + 16;  // bytes per int8 tile row: conflict-free fragment reads
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

__device__ __forceinline__ void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait<0>();
}

__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
               : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

__device__ __forceinline__ uint32_t word_at(const int8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ void load_ints8(const int32_t* p, int (&v)[8]) {  // 16-byte aligned
  const int4 lo = *reinterpret_cast<const int4*>(p), hi = *reinterpret_cast<const int4*>(p + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

template <class F>
struct Tile {
  static constexpr bool kKQuant = F::kElems == 256;
  static constexpr int kBlocks = kKQuant ? 1 : 8;  // weight blocks per step
  static constexpr int kStepBytes = kBlocks * F::kBlockBytes;
  // The aligned chunks around a step (up to 15 bytes before it) and the readers' slack.
  static constexpr int kRawBytes = (kStepBytes + 15 + 15) / 16 * 16 + 16;
};

template <class F>
struct Shared {
  int8_t w[kRows][kTileStride];
  int8_t x[kTokens][kTileStride];
  uint8_t raw[kRows][Tile<F>::kRawBytes];
  float wd[8][kRows];    // 32-element formats: d per block; k-quants: [0] d, [1] dmin
  float wm[8][kRows];    // Q4_1/Q5_1: m per block
  float xd[8][kTokens];  // activation scale per block
  float xs[8][kTokens];  // Q8_1 sums per block
  int32_t wsc[kRows][16];   // k-quants: sub-block (Q6_K: group) scales
  int32_t wmin[kRows][8];   // Q4_K/Q5_K mins
  int32_t xpair[kTokens][8];  // Q4_K/Q5_K: sums of the codes of each 32-element sub-block
};

struct GemmArgs {
  const uint8_t* w;
  size_t w_stride;
  int64_t n;
  int blocks;  // per row
  QuantizedActivations act;
  int64_t tokens;
  float* out;
  size_t out_stride;
  const float* bias;
};

// Step s into shared memory: raw bytes and codes by cp.async, then decoded.
template <class F>
__device__ void load_step(const GemmArgs& a, Shared<F>& sh, int64_t n0, int64_t t0, int s) {
  using Tl = Tile<F>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_bytes = a.blocks * F::kBlockBytes;
  const int start = s * Tl::kStepBytes, end = min(row_bytes, start + Tl::kStepBytes);
  const int aligned = start & ~15, offset = start - aligned;
  const int chunks = (end - aligned + 15) / 16;
  const int step_blocks = min(Tl::kBlocks, a.blocks - s * Tl::kBlocks);
  const int code_chunks = step_blocks * F::kElems / 16;
  for (int r = warp; r < kRows; r += kWarps) {
    const uint8_t* src = a.w + static_cast<size_t>(min(n0 + r, a.n - 1)) * a.w_stride + aligned;
    for (int c = lane; c < chunks; c += 32) cp_async16(&sh.raw[r][16 * c], src + 16 * c);
    const int64_t t = min(t0 + r, a.tokens - 1);
    const int8_t* codes = a.act.codes + t * a.act.row_stride + static_cast<int64_t>(s) * kStepElems;
    for (int c = lane; c < code_chunks; c += 32) cp_async16(&sh.x[r][16 * c], codes + 16 * c);
  }
  // Activation scales (and sums) of the step's blocks.
  for (int i = threadIdx.x; i < Tl::kBlocks * kTokens; i += kThreads) {
    const int b = i / kTokens, r = i % kTokens;
    if (b >= step_blocks) continue;
    const int64_t t = min(t0 + r, a.tokens - 1);
    const int64_t ab = t * a.blocks + s * Tl::kBlocks + b;
    sh.xd[b][r] = a.act.scales[ab];
    if constexpr (F::kHasMin && !Tl::kKQuant) sh.xs[b][r] = a.act.sums[ab];
  }
  if constexpr (Tl::kKQuant && F::kHasMin) {
    for (int i = threadIdx.x; i < kTokens * 8; i += kThreads) {
      const int r = i / 8, j = i % 8;
      const int64_t t = min(t0 + r, a.tokens - 1);
      const int16_t* g = a.act.group_sums + t * (static_cast<int64_t>(a.blocks) * 16) + 16 * s + 2 * j;
      sh.xpair[r][j] = g[0] + g[1];
    }
  }
  cp_async_wait_all();
  __syncthreads();
  // Decode: (row, block, part) units.
  constexpr int kUnits = kRows * Tl::kBlocks * F::kLanes;
  for (int u = threadIdx.x; u < kUnits; u += kThreads) {
    const int r = u / (Tl::kBlocks * F::kLanes), b = (u / F::kLanes) % Tl::kBlocks, part = u % F::kLanes;
    if (b >= step_blocks) continue;
    const uint8_t* block = &sh.raw[r][offset + b * F::kBlockBytes];
    typename F::Lane l;
    F::lane(block, part, l);
    if constexpr (Tl::kKQuant) {
      F::store(l, part, sh.w[r]);
      F::store_scales(l, part, sh.wsc[r], sh.wmin[r]);
      if (part == 0) {
        sh.wd[0][r] = F::d(block);
        sh.wd[1][r] = F::dmin(block);
      }
    } else {
      F::store(l, part, &sh.w[r][32 * b]);
      if (part == 0) {
        sh.wd[b][r] = F::d(block);
        sh.wm[b][r] = F::m(block);
      }
    }
  }
  __syncthreads();
}

template <class F>
__global__ void __launch_bounds__(kThreads) gemm_exact_kernel(GemmArgs a) {
  allow_next_kernel();
  wait_for_inputs();
  using Tl = Tile<F>;
  extern __shared__ __align__(16) uint8_t smem[];
  auto& sh = *reinterpret_cast<Shared<F>*>(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, quad = lane % 4;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int wr = 16 * (warp % 4), wt = 32 * (warp / 4);  // the warp's rows and tokens in the tile
  const int ra = wr + gid, rb = wr + gid + 8;
  // Output (j, i): row i < 2 ? ra : rb, token wt + 8j + 2 quad + (i & 1).
  constexpr int kAcc = Tl::kKQuant ? 1 : 4;
  float acc[kAcc][4][4] = {};
  const int steps = (a.blocks + Tl::kBlocks - 1) / Tl::kBlocks;
  for (int s = 0; s < steps; ++s) {
    load_step<F>(a, sh, n0, t0, s);
    if constexpr (!Tl::kKQuant) {
      const int step_blocks = min(Tl::kBlocks, a.blocks - s * Tl::kBlocks);
#pragma unroll
      for (int b = 0; b < Tl::kBlocks; ++b) {
        if (b >= step_blocks) break;
        const int k0 = 32 * b + 4 * quad;
        const uint32_t af[4] = {word_at(&sh.w[ra][k0]), word_at(&sh.w[rb][k0]), word_at(&sh.w[ra][k0 + 16]),
                                word_at(&sh.w[rb][k0 + 16])};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int8_t* xr = sh.x[wt + 8 * j + gid];
          int c[4];
          mma_k32(c, af, word_at(xr + k0), word_at(xr + k0 + 16));
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = i < 2 ? ra : rb, t = wt + 8 * j + 2 * quad + (i & 1);
            float& v = acc[b % 4][j][i];
            v = __fmaf_rn(small_int_to_float(c[i]), __fmul_rn(sh.wd[b][n], sh.xd[b][t]), v);
            if constexpr (F::kHasMin) v = __fmaf_rn(sh.wm[b][n], sh.xs[b][t], v);
          }
        }
      }
    } else {
      int isum[4][4] = {};
      if constexpr (F::kType == DType::Q6_K) {
#pragma unroll
        for (int g = 0; g < 16; ++g) {
          const int k0 = 16 * g + 4 * quad;
          const uint32_t a0 = word_at(&sh.w[ra][k0]), a1 = word_at(&sh.w[rb][k0]);
          const int sa = sh.wsc[ra][g], sb = sh.wsc[rb][g];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int c[4];
            mma_k16(c, a0, a1, word_at(&sh.x[wt + 8 * j + gid][k0]));
#pragma unroll
            for (int i = 0; i < 4; ++i) isum[j][i] += (i < 2 ? sa : sb) * c[i];
          }
        }
      } else {
#pragma unroll
        for (int sb8 = 0; sb8 < 8; ++sb8) {
          const int k0 = 32 * sb8 + 4 * quad;
          const uint32_t af[4] = {word_at(&sh.w[ra][k0]), word_at(&sh.w[rb][k0]), word_at(&sh.w[ra][k0 + 16]),
                                  word_at(&sh.w[rb][k0 + 16])};
          const int sa = sh.wsc[ra][sb8], sb = sh.wsc[rb][sb8];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int8_t* xr = sh.x[wt + 8 * j + gid];
            int c[4];
            mma_k32(c, af, word_at(xr + k0), word_at(xr + k0 + 16));
#pragma unroll
            for (int i = 0; i < 4; ++i) isum[j][i] += (i < 2 ? sa : sb) * c[i];
          }
        }
      }
      int mins[2][8] = {};  // rows ra, rb
      if constexpr (F::kHasMin) {
#pragma unroll
        for (int h = 0; h < 2; ++h) load_ints8(sh.wmin[h == 0 ? ra : rb], mins[h]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // the two tokens of the lane in this tile
          const int t = wt + 8 * j + 2 * quad + e;
          const float da = sh.xd[0][t];
          int pairs[8] = {};
          if constexpr (F::kHasMin) load_ints8(sh.xpair[t], pairs);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = 2 * h + e, n = h == 0 ? ra : rb;
            float& v = acc[0][j][i];
            v = __fmaf_rn(__int2float_rn(isum[j][i]), __fmul_rn(sh.wd[0][n], da), v);
            if constexpr (F::kHasMin) {
              int msum = 0;
#pragma unroll
              for (int q = 0; q < 8; ++q) msum += mins[h][q] * pairs[q];
              v = __fmaf_rn(__int2float_rn(msum), __fmul_rn(sh.wd[1][n], -da), v);
            }
          }
        }
      }
    }
    __syncthreads();  // the next step overwrites the tiles
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t n = n0 + (i < 2 ? ra : rb), t = t0 + wt + 8 * j + 2 * quad + (i & 1);
      if (n >= a.n || t >= a.tokens) continue;
      float v = acc[0][j][i];
      if constexpr (kAcc == 4) v = __fadd_rn(__fadd_rn(acc[0][j][i], acc[1][j][i]), __fadd_rn(acc[2][j][i], acc[3][j][i]));
      if (a.bias != nullptr) v = __fadd_rn(v, a.bias[n]);
      a.out[static_cast<size_t>(t) * a.out_stride + n] = v;
    }
  }
}

template <class F>
void launch_format(const GemmArgs& args, cudaStream_t stream) {
  static const bool configured = [] {
    check(cudaFuncSetAttribute(gemm_exact_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(sizeof(Shared<F>))),
          "exact gemm shared memory");
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((args.tokens + kTokens - 1) / kTokens),
                  static_cast<unsigned>((args.n + kRows - 1) / kRows));
  launch_kernel("exact gemm kernel", gemm_exact_kernel<F>, grid, kThreads, sizeof(Shared<F>), stream, args);
}

}  // namespace

void launch_gemm_quantized(const QuantizedActivations& q, int64_t tokens, const TensorRef& w, const float* bias,
                           const TensorRef& out, cudaStream_t stream) {
  if (tokens == 0 || w.rows == 0) return;
  if ((w.rows + kRows - 1) / kRows > 65535) fail(ErrorCode::Unsupported, "exact gemm: ", w.rows, " weight rows");
  GemmArgs args{static_cast<const uint8_t*>(w.data), w.row_stride, w.rows, 0, q, tokens,
                static_cast<float*>(out.data), out.row_stride / sizeof(float), bias};
  const bool known = visit_exact_format(w.dtype, [&]<class F>(F) {
    args.blocks = static_cast<int>(w.cols / F::kElems);
    launch_format<F>(args, stream);
  });
  if (!known) fail(ErrorCode::Internal, "exact gemm: no kernel for ", dtype_name(w.dtype));
}

}  // namespace cellm::cuda
