// Host time of one decode step of the cell cache: prepare + commit for 256 sessions that
// each hold 4096 tokens of context, one token per session per step. Two windows (full
// history and 512, as Gemma 3 has) so both kinds of page list are built. The cell size does
// not enter the figure (kv/ never touches the payload), so the geometry is tiny to keep the
// pool in memory: 256 x 4k cells x 64 bytes.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <vector>

#include "kv/cell_cache.h"
#include "kv/host_storage.h"

namespace {

using cellm::kv::CellCache;
using cellm::kv::SeqId;

constexpr int kSessions = 256;
constexpr int32_t kContext = 4096;
constexpr int32_t kRewindEvery = 16;  // steps between rewinds back to kContext

struct Workload {
  std::unique_ptr<CellCache> cache;
  std::vector<SeqId> ids;
  std::vector<int32_t> positions;
};

// Built once per page size: prefilling a million tokens is not what is measured.
Workload& workload(int32_t page_cells) {
  static std::map<int32_t, Workload> built;
  auto [it, fresh] = built.try_emplace(page_cells);
  Workload& w = it->second;
  if (!fresh) return w;
  cellm::kv::Geometry geometry({{1, 8, 0, cellm::DType::F16}, {1, 8, 512, cellm::DType::F16}});
  w.cache = std::make_unique<CellCache>(
      geometry,
      cellm::kv::CellCacheConfig{
          .page_cells = page_cells, .initial_rows = 512, .max_rows = int64_t{1} << 22, .max_write = 512},
      std::make_unique<cellm::kv::HostStorage>(geometry.bytes_per_cell()));
  for (int s = 0; s < kSessions; ++s) w.ids.push_back(w.cache->create());
  std::vector<SeqId> chunk_ids(512);
  std::vector<int32_t> chunk_pos(512);
  for (SeqId id : w.ids) {
    for (int32_t at = 0; at < kContext; at += 512) {
      for (int32_t i = 0; i < 512; ++i) {
        chunk_ids[static_cast<size_t>(i)] = id;
        chunk_pos[static_cast<size_t>(i)] = at + i;
      }
      w.cache->prepare(chunk_ids, chunk_pos);
      w.cache->commit();
    }
  }
  w.positions.assign(w.ids.size(), kContext);
  return w;
}

void BM_DecodeStepPrepareCommit(benchmark::State& state) {
  Workload& w = workload(static_cast<int32_t>(state.range(0)));
  int64_t page_entries = 0;
  int32_t steps_since_rewind = 0;
  for (auto _ : state) {
    const cellm::kv::StepBuffers& step = w.cache->prepare(w.ids, w.positions);
    for (const auto& wp : step.windows) page_entries += static_cast<int64_t>(wp.pages.size());
    w.cache->commit();
    w.cache->mark_cell_pos_synced();  // as the executor does after its upload
    for (int32_t& p : w.positions) ++p;
    if (++steps_since_rewind == kRewindEvery) {
      state.PauseTiming();
      for (SeqId id : w.ids) w.cache->rewind(id, kContext);
      w.positions.assign(w.ids.size(), kContext);
      steps_since_rewind = 0;
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * kSessions);  // tokens placed
  state.counters["page_entries_per_step"] =
      benchmark::Counter(static_cast<double>(page_entries) / static_cast<double>(state.iterations()));
  state.counters["pool_rows"] = static_cast<double>(w.cache->metrics().rows);
}
BENCHMARK(BM_DecodeStepPrepareCommit)->Arg(16)->Arg(32)->Unit(benchmark::kMicrosecond);

void BM_DecodeStepPrepareAbort(benchmark::State& state) {
  Workload& w = workload(static_cast<int32_t>(state.range(0)));
  for (int32_t& p : w.positions) p = w.cache->length(w.ids[static_cast<size_t>(&p - w.positions.data())]);
  for (auto _ : state) {
    w.cache->prepare(w.ids, w.positions);
    w.cache->abort();
  }
  state.SetItemsProcessed(state.iterations() * kSessions);
}
BENCHMARK(BM_DecodeStepPrepareAbort)->Arg(16)->Unit(benchmark::kMicrosecond);

}  // namespace
