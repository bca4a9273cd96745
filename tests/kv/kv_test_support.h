#pragma once
// Shared by the kv tests: small geometries, a cell cache over host memory whose cells can be
// tagged (a token identity written where the forward would write K), and the kernel-side
// reading of a step's page lists.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kv/cell_cache.h"
#include "kv/faulty_storage.h"
#include "kv/host_storage.h"

namespace cellm::kv::testing {

// What f threw; a test failure when it threw nothing.
struct Thrown {
  ErrorCode code = ErrorCode::Internal;
  std::string message;
};

inline Thrown thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "no error was thrown";
  return {};
}

// One layer per window, F32, 1 head of 4: a cell is 32 bytes per layer.
inline Geometry windows_geometry(std::vector<int32_t> windows) {
  std::vector<LayerGeometry> layers;
  for (int32_t w : windows) layers.push_back({1, 4, w, DType::F32});
  return Geometry(std::move(layers));
}

// A cell cache over HostStorage behind a FaultyStorage, with handles on both.
struct TestCache {
  std::unique_ptr<CellCache> cache;
  FaultyStorage* faulty = nullptr;
  HostStorage* host = nullptr;

  CellCache* operator->() const { return cache.get(); }
  CellCache& operator*() const { return *cache; }

  // The identity of the token a cell holds: 8 bytes at the start of the row, where the
  // forward writes layer 0's K.
  void write_tag(int64_t cell, uint64_t tag) const { std::memcpy(host->row(cell), &tag, sizeof tag); }
  uint64_t tag(int64_t cell) const {
    uint64_t t;
    std::memcpy(&t, host->row(cell), sizeof t);
    return t;
  }
};

inline TestCache make_cache(const Geometry& geometry, CellCacheConfig config = {}) {
  auto host = std::make_unique<HostStorage>(geometry.bytes_per_cell());
  HostStorage* host_ptr = host.get();
  auto faulty = std::make_unique<FaultyStorage>(std::move(host));
  FaultyStorage* faulty_ptr = faulty.get();
  TestCache t;
  t.cache = std::make_unique<CellCache>(geometry, config, std::move(faulty));
  t.faulty = faulty_ptr;
  t.host = host_ptr;
  return t;
}

// The cells row i of the pending step reads for window index wi, as a kernel finds them:
// every cell of a listed page whose cell_pos passes the position test. Sorted.
inline std::vector<int64_t> kernel_visible_cells(const CellCache& cache, int32_t wi, size_t row, int32_t pos) {
  const StepBuffers& step = cache.step();
  const WindowPages& wp = step.windows.at(static_cast<size_t>(wi));
  const int32_t P = cache.config().page_cells;
  std::vector<int64_t> cells;
  for (int32_t e = wp.page_rows[row]; e < wp.page_rows[row + 1]; ++e) {
    const int64_t first = int64_t{wp.pages[static_cast<size_t>(e)]} * P;
    for (int64_t c = first; c < first + P; ++c) {
      const int32_t q = cache.cell_pos()[static_cast<size_t>(c)];
      if (q <= pos && (wp.window == 0 || q > pos - wp.window)) cells.push_back(c);
    }
  }
  std::sort(cells.begin(), cells.end());
  return cells;
}

// The cells marked in row i of a dense mask. Sorted.
inline std::vector<int64_t> dense_visible_cells(const std::vector<int8_t>& mask, int32_t read_len, size_t row) {
  std::vector<int64_t> cells;
  for (int32_t c = 0; c < read_len; ++c) {
    if (mask[row * static_cast<size_t>(read_len) + static_cast<size_t>(c)] != 0) cells.push_back(c);
  }
  return cells;
}

// Runs a step of n tokens for one sequence and commits it; returns the cells written.
inline std::vector<int32_t> append(CellCache& cache, SeqId seq, int32_t n) {
  std::vector<SeqId> ids(static_cast<size_t>(n), seq);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = cache.length(seq) + i;
  std::vector<int32_t> cells = cache.prepare(ids, pos).cells;
  cache.commit();
  return cells;
}

// Everything the cache exposes about its state, to prove that a failed or aborted operation
// changed nothing.
struct CacheState {
  CacheMetrics metrics;
  std::vector<int32_t> cell_pos;
  std::vector<std::pair<int32_t, std::vector<int32_t>>> sequences;  // length, pages (by id)
  void* base = nullptr;
  bool operator==(const CacheState&) const = default;
};

inline CacheState capture(const CellCache& cache, SeqId id_bound) {
  CacheState s;
  s.metrics = cache.metrics();
  s.cell_pos.assign(cache.cell_pos().begin(), cache.cell_pos().end());
  for (SeqId seq = 0; seq < id_bound; ++seq) {
    if (!cache.exists(seq)) {
      s.sequences.push_back({-1, {}});
      continue;
    }
    auto pages = cache.pages_of(seq);
    s.sequences.push_back({cache.length(seq), std::vector<int32_t>(pages.begin(), pages.end())});
  }
  s.base = cache.storage().base();
  return s;
}

}  // namespace cellm::kv::testing
