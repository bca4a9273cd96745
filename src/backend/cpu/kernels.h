#pragma once
// The CPU kernels behind CpuBackend (matrix products are in matmul.h). Each splits its rows
// over the pool's threads; the result of a row never depends on the other rows or the thread
// count (batch invariance, DESIGN.md section 6).
#include "backend/ops.h"
#include "core/thread_pool.h"

namespace cellm::cpu {

using backend::TensorRef;

void embed(ThreadPool& pool, const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out);
void rms_norm(ThreadPool& pool, const TensorRef& x, const float* weight, int32_t group, float eps,
              const TensorRef& out);
void rope(ThreadPool& pool, const TensorRef& x, const int32_t* positions, const backend::RopeParams& params);
void kv_store(ThreadPool& pool, const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst);
void attention(ThreadPool& pool, const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions,
               float scale, const TensorRef& out);
void add(ThreadPool& pool, const TensorRef& a, const TensorRef& b, const TensorRef& out);
void glu(ThreadPool& pool, const TensorRef& gate, const TensorRef& up, backend::GluActivation act,
         const TensorRef& out);
void gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out);

// Splits n items into about `parts` equal chunks for parallel_for: chunk c is [begin, end).
struct Chunk {
  int64_t begin;
  int64_t end;
};
inline Chunk chunk_of(int64_t n, int64_t parts, int64_t c) {
  return {n * c / parts, n * (c + 1) / parts};
}

}  // namespace cellm::cpu
