// Rotary position embedding. The angle of pair i is pos * freq_scale * base^(-2i/rope_dim),
// computed by repeated multiplication in float as ggml does, so our rotations match llama.cpp's
// to the last bit where the inputs do.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"

namespace cellm::cpu {

void rope(ThreadPool& pool, const TensorRef& x, const int32_t* positions, const backend::RopeParams& p) {
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(p.rope_dim));
  const int64_t tasks = std::min<int64_t>(x.rows, pool.size());
  auto rotate_rows = [&](int64_t begin, int64_t end) {
    // The angles depend on the position only: compute them once per row for every head.
    std::vector<float> cos_sin(static_cast<size_t>(p.rope_dim));
    const int32_t half = p.rope_dim / 2;
    const bool interleaved = p.layout == backend::RopeLayout::Interleaved;
    for (int64_t t = begin; t < end; ++t) {
      float theta = static_cast<float>(positions[t]) * p.freq_scale;
      for (int32_t i = 0; i < half; ++i) {
        cos_sin[2 * i] = std::cos(theta);
        cos_sin[2 * i + 1] = std::sin(theta);
        theta *= theta_scale;
      }
      float* row = x.row<float>(t);
      for (int32_t h = 0; h < p.n_heads; ++h) {
        float* head = row + static_cast<int64_t>(h) * p.head_dim;
        for (int32_t i = 0; i < half; ++i) {
          const float c = cos_sin[2 * i];
          const float s = cos_sin[2 * i + 1];
          const int32_t a = interleaved ? 2 * i : i;
          const int32_t b = interleaved ? 2 * i + 1 : i + half;
          const float x0 = head[a];
          const float x1 = head[b];
          head[a] = x0 * c - x1 * s;
          head[b] = x0 * s + x1 * c;
        }
      }
    }
  };
  if (tasks <= 1) {
    rotate_rows(0, x.rows);
    return;
  }
  pool.parallel_for(tasks, [&](int64_t task, int) {
    const Chunk c = chunk_of(x.rows, tasks, task);
    rotate_rows(c.begin, c.end);
  });
}

}  // namespace cellm::cpu
