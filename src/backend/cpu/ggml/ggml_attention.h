#pragma once
// ggml's attention with flash attention off (llama-graph.cpp build_attn_mha), per query head:
//   scores = K . fp16(q)             ggml_mul_mat(k, q), the f16 product
//   p = softmax(scores * scale)      ggml_soft_max_ext: ggml_v_expf, sums in double by vector
//   out = V^T . fp16(p)              ggml_mul_mat(v, kq), the f16 product again
// The f16 products take ggml_vec_dot_f16 in a forward of one token and llamafile's tinyBLAS
// in a forward of several, which sum in different orders. Both sum over llama.cpp's cache
// cells, whose index is the token's position for a sequence alone in a fresh cache; cellm
// uses positions (invisible cells add exact zeros in ggml, so only visible ones are summed).
// With a query of one token, ggml's second product runs over n_kv cells (the highest position
// plus one, rounded up to 32), the cells beyond its last whole 4-vector step in double.
#include "backend/cpu/ggml/ggml_build.h"
#include "backend/ops.h"
#include "core/thread_pool.h"

namespace cellm::cpu::ggml {

// `scale_queries`: the model scales q before the product (gemma3's ggml_scale on Qcur) rather
// than the scores (llama's kq_scale).
void attention(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
               const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out);

// The two compilations attention() chooses between (tests compare them): the portable one and,
// for processors with AVX2, FMA and F16C, the AVX2 one.
namespace portable {
void attention(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
               const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out);
}
namespace avx2 {
void attention(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
               const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out);
}

}  // namespace cellm::cpu::ggml
