// Attention step time when many sessions share the pool versus one session owning the same
// number of cells (issue #8's figure (d)): the page lists make a row's cost follow the cells
// it can see, so 64 rows x 2k cells should cost about what 1 row x 128k cells costs.
//
//   attention_scaling [--backend cuda] [--sessions 64] [--context 2048] [--iters 200]
// Geometry: one layer of Llama-3-8B (32 query heads, 8 KV heads of 128, f16 cells).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/factory.h"
#include "core/half.h"
#include "kv/cell_cache.h"

using namespace cellm;

namespace {

struct Timing {
  double ms_per_step;
  int64_t rows;
  int64_t cells_read;
};

Timing time_attention(backend::Backend& be, int sessions, int context, int iters) {
  const kv::Geometry geometry({{8, 128, 0, DType::F16}});
  kv::CellCacheConfig config;
  config.page_cells = 16;
  config.initial_rows = int64_t{sessions} * context + 1024;
  config.max_write = 512;
  kv::CellCache cache(geometry, config, be.create_kv_storage(geometry.bytes_per_cell()));
  std::vector<kv::SeqId> seqs;
  for (int s = 0; s < sessions; ++s) seqs.push_back(cache.create());
  // Fill every session's history in steps of up to 512 tokens (no forward: only placement).
  for (int s = 0; s < sessions; ++s) {
    for (int start = 0; start < context; start += 512) {
      const int n = std::min(512, context - start);
      std::vector<kv::SeqId> ids(n, seqs[s]);
      std::vector<int32_t> pos(n);
      for (int i = 0; i < n; ++i) pos[i] = start + i;
      cache.prepare(ids, pos);
      cache.commit();
    }
  }
  // Random K and V everywhere (small values: scores stay finite).
  const size_t pool_bytes = cache.storage().allocated_bytes();
  std::vector<uint16_t> host(pool_bytes / 2);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& h : host) h = fp32_to_fp16(u(rng));
  be.upload(cache.storage().base(), host.data(), pool_bytes);
  // The decode step: one row per session at its next position.
  std::vector<int32_t> positions(sessions, context);
  const kv::StepBuffers& step = cache.prepare(seqs, positions);
  const auto cell_pos = cache.cell_pos();
  auto upload = [&](const void* p, size_t bytes) {
    void* d = be.allocate(bytes, "attention_scaling");
    be.upload(d, p, bytes);
    return d;
  };
  void* d_cell_pos = upload(cell_pos.data(), cell_pos.size() * 4);
  void* d_page_rows = upload(step.windows[0].page_rows.data(), step.windows[0].page_rows.size() * 4);
  void* d_pages = upload(step.windows[0].pages.data(), step.windows[0].pages.size() * 4);
  void* d_positions = upload(positions.data(), positions.size() * 4);
  const size_t q_floats = static_cast<size_t>(sessions) * 32 * 128;
  std::vector<float> q(q_floats);
  for (auto& x : q) x = u(rng);
  void* d_q = upload(q.data(), q_floats * 4);
  void* d_out = be.allocate(q_floats * 4, "attention_scaling out");
  const backend::TensorRef q_ref{d_q, DType::F32, sessions, 32 * 128, 32 * 128 * 4};
  const backend::TensorRef out_ref{d_out, DType::F32, sessions, 32 * 128, 32 * 128 * 4};
  char* pool = static_cast<char*>(cache.storage().base());
  const backend::PagedKv kv{pool + geometry.k_offset(0), pool + geometry.v_offset(0), geometry.bytes_per_cell(),
                            DType::F16, 8, 128, 0, 16, static_cast<const int32_t*>(d_cell_pos),
                            static_cast<const int32_t*>(d_page_rows), static_cast<const int32_t*>(d_pages)};
  for (int i = 0; i < 10; ++i) be.attention(q_ref, kv, static_cast<const int32_t*>(d_positions), 0.088f, out_ref);
  be.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) be.attention(q_ref, kv, static_cast<const int32_t*>(d_positions), 0.088f, out_ref);
  be.synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
  cache.abort();
  for (void* p : {d_cell_pos, d_page_rows, d_pages, d_positions, d_q, d_out}) be.release(p);
  return {ms, sessions, int64_t{sessions} * context};
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "cuda";
  int sessions = 64, context = 2048, iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--backend") backend_name = argv[i + 1];
    else if (a == "--sessions") sessions = std::stoi(argv[i + 1]);
    else if (a == "--context") context = std::stoi(argv[i + 1]);
    else if (a == "--iters") iters = std::stoi(argv[i + 1]);
  }
  try {
    auto be = backend::create_backend({backend_name, 0, 0});
    const Timing many = time_attention(*be, sessions, context, iters);
    const Timing one = time_attention(*be, 1, sessions * context, iters);
    std::printf("backend %s\n", be->description().c_str());
    std::printf("%d sessions x %d cells: %.4f ms per attention step (%lld rows)\n", sessions, context,
                many.ms_per_step, static_cast<long long>(many.rows));
    std::printf("1 session x %d cells:   %.4f ms per attention step (1 row)\n", sessions * context, one.ms_per_step);
    std::printf("ratio (many / one): %.3f\n", many.ms_per_step / one.ms_per_step);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_scaling: %s\n", e.what());
    return 1;
  }
}
