#include "backend/cpu/ggml/ggml_attention.h"

#include "backend/cpu/ggml/ggml_attention_kernel.h"
#include "backend/cpu/matmul.h"

namespace cellm::cpu::ggml {

namespace portable {
void attention(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
               const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out) {
  attention_rows(build, pool, q, kv, positions, scale, scale_queries, out);
}
}  // namespace portable

void attention(Build build, ThreadPool& pool, const backend::TensorRef& q, const backend::PagedKv& kv,
               const int32_t* positions, float scale, bool scale_queries, const backend::TensorRef& out) {
  // The AVX2 copy where the CPU has it, unless CELLM_CPU_ISA=portable asks for the other.
  static const bool use_avx2 = default_matmul_isa() != MatmulIsa::Portable;
  (use_avx2 ? avx2::attention : portable::attention)(build, pool, q, kv, positions, scale, scale_queries, out);
}

}  // namespace cellm::cpu::ggml
