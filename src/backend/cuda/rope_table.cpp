#include "backend/cuda/rope_table.h"

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"

namespace cellm::cuda {

RopeTables::~RopeTables() {
  for (const Entry& e : entries_) {
    try {
      memory_.release(e.table);
    } catch (...) {
    }
  }
}

const float2* RopeTables::find(const backend::RopeParams& p, cudaStream_t stream) {
  for (const Entry& e : entries_)
    if (e.base == p.base && e.freq_scale == p.freq_scale && e.rope_dim == p.rope_dim) return e.table;
  if (stream_is_capturing(stream)) return nullptr;
  // The CPU kernel's loop, expression for expression (float, host libm).
  const int half = p.rope_dim / 2;
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(p.rope_dim));
  std::vector<float2> host(static_cast<size_t>(kRopeTablePositions) * half);
  for (int pos = 0; pos < kRopeTablePositions; ++pos) {
    float theta = static_cast<float>(pos) * p.freq_scale;
    for (int i = 0; i < half; ++i) {
      host[static_cast<size_t>(pos) * half + i] = make_float2(std::cos(theta), std::sin(theta));
      theta *= theta_scale;
    }
  }
  auto* table = static_cast<float2*>(memory_.allocate(host.size() * sizeof(float2), "rope table"));
  try {
    check(cudaMemcpyAsync(table, host.data(), host.size() * sizeof(float2), cudaMemcpyHostToDevice, stream),
          "rope table upload");
    check(cudaStreamSynchronize(stream), "rope table upload");
  } catch (...) {
    memory_.release(table);
    throw;
  }
  entries_.push_back({p.base, p.freq_scale, p.rope_dim, table});
  return table;
}

}  // namespace cellm::cuda
