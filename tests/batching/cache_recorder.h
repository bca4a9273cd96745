#pragma once
// Watches the cache from the runner's step hook (the engine thread, just before each forward
// attempt) to show what a failed attempt did to it. Between two consecutive attempts no
// forward committed anything, so after a failed attempt every sequence still alive must hold
// exactly the length and pages it held before it (sequences created since are empty), and
// the live cells must be exactly those of the alive sequences: nothing advanced, nothing the
// failed step placed tentatively was left behind.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "batching/runner.h"
#include "kv/cell_cache.h"

namespace cellm::test {

struct CacheState {
  struct Seq {
    int32_t length = 0;
    std::vector<int32_t> pages;
    bool operator==(const Seq&) const = default;
  };
  std::map<kv::SeqId, Seq> seqs;
  int64_t live_cells = 0;
  int64_t pages_in_use = 0;
  int64_t failed_steps = 0;  // the runner's count as of this attempt

  static CacheState of(const kv::CellCache& cache, int64_t failed_steps) {
    CacheState s;
    constexpr kv::SeqId kMostSeqIds = 1024;  // ids are recycled: tests stay far below this
    for (kv::SeqId id = 0; id < kMostSeqIds; ++id)
      if (cache.exists(id)) {
        const auto pages = cache.pages_of(id);
        s.seqs[id] = {cache.length(id), {pages.begin(), pages.end()}};
      }
    const kv::CacheMetrics m = cache.metrics();
    s.live_cells = m.live_cells;
    s.pages_in_use = m.pages_in_use;
    s.failed_steps = failed_steps;
    return s;
  }
};

class CacheRecorder {
 public:
  // Installs itself as the runner's step hook; `then` (optional) runs after the snapshot and
  // may throw to fail the attempt.
  void install(batching::Runner& runner, kv::CellCache& cache, std::function<void(int64_t)> then = {}) {
    runner.set_step_hook([this, &runner, &cache, then](int64_t attempt) {
      const int64_t failed = runner.metrics().failed_steps;  // published before this attempt
      {
        std::lock_guard<std::mutex> lock(mutex_);
        states_[attempt] = CacheState::of(cache, failed);
      }
      if (then) then(attempt);
    });
  }

  // Checks every failed attempt against the next one; returns how many failed attempts were
  // checked. Call when the runner is idle.
  int expect_failed_attempts_changed_nothing() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int checked = 0;
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      auto next = std::next(it);
      if (next == states_.end() || next->first != it->first + 1) continue;
      if (next->second.failed_steps == it->second.failed_steps) continue;  // attempt it->first ran
      ++checked;
      const CacheState &before = it->second, &after = next->second;
      int64_t cells = 0, pages = 0;
      for (const auto& [id, seq] : after.seqs) {
        cells += seq.length;
        pages += static_cast<int64_t>(seq.pages.size());
        if (seq.length == 0 && seq.pages.empty()) continue;  // created since
        auto was = before.seqs.find(id);
        EXPECT_TRUE(was != before.seqs.end() && was->second == seq)
            << "sequence " << id << " changed across failed attempt " << it->first;
      }
      EXPECT_EQ(after.live_cells, cells) << "cells left behind by failed attempt " << it->first;
      EXPECT_EQ(after.pages_in_use, pages) << "pages left behind by failed attempt " << it->first;
      EXPECT_LE(after.live_cells, before.live_cells);
    }
    return checked;
  }

 private:
  mutable std::mutex mutex_;
  std::map<int64_t, CacheState> states_;
};

}  // namespace cellm::test
