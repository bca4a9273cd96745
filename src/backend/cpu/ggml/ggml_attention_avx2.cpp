// ggml_attention_kernel.h compiled for AVX2 + FMA + F16C.
#include "backend/cpu/ggml/ggml_attention_kernel.h"

namespace cellm::cpu::ggml::avx2 {

void attention(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
               const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out) {
  attention_rows(build, pool, q, kv, positions, scale, scale_queries, out);
}

}  // namespace cellm::cpu::ggml::avx2
