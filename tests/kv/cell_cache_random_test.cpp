// A randomized workload over the cell cache checked against a brute-force model after every
// operation. The model is the plain meaning of a cache: each session is a list of token
// identities by position. Every token's identity (a tag) is written into its cell, as the
// forward would write K, so a row's visible cells must hold exactly its session's tokens in
// the window - whatever clone shares, rewind copies or growth moves.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>

#include "core/error.h"
#include "kv/cell_cache.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

using testing::capture;
using testing::kernel_visible_cells;
using testing::make_cache;
using testing::windows_geometry;

using Model = std::map<SeqId, std::vector<uint64_t>>;  // session -> tag of each position

class RandomWorkload {
 public:
  RandomWorkload(int32_t page_cells, uint32_t seed)
      : t_(make_cache(windows_geometry({0, 4, 512}),
                      {.page_cells = page_cells, .initial_rows = 64, .max_rows = 1 << 16, .max_write = 64})),
        rng_(seed) {}

  void run(int operations) {
    for (int op = 0; op < operations; ++op) {
      SCOPED_TRACE(::testing::Message() << "operation " << op);
      one_operation();
      check_committed_state();
      probe(op % 25 == 0);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  void remove_all_and_check_empty() {
    while (!model_.empty()) {
      t_->remove(model_.begin()->first);
      model_.erase(model_.begin());
    }
    const CacheMetrics m = t_->metrics();
    EXPECT_EQ(m.live_cells, 0);
    EXPECT_EQ(m.pages_in_use, 0);
    EXPECT_EQ(m.shared_cells, 0);
    EXPECT_EQ(m.sequences, 0);
    EXPECT_TRUE(std::all_of(t_->cell_pos().begin(), t_->cell_pos().end(), [](int32_t p) { return p == kFreeCellPos; }));
  }

  std::map<std::string, int> counts;

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  SeqId any_session() {
    auto it = model_.begin();
    std::advance(it, pick(0, static_cast<int>(model_.size()) - 1));
    return it->first;
  }

  void one_operation() {
    const int roll = pick(0, 99);
    const bool crowded = model_.size() >= 24;
    if (model_.empty() || (roll < 8 && !crowded)) return create();
    if (roll < 48) return step(/*commit=*/true, /*inject_fault=*/false);
    if (roll < 58) return step(/*commit=*/false, /*inject_fault=*/false);
    if (roll < 63) return step(/*commit=*/true, /*inject_fault=*/true);
    if (roll < 75 && !crowded) return clone();
    if (roll < 88) return rewind();
    return remove();
  }

  void create() {
    const SeqId s = t_->create();
    ASSERT_EQ(model_.count(s), 0u);
    model_[s] = {};
    ++counts["create"];
  }

  void remove() {
    const SeqId s = any_session();
    t_->remove(s);
    model_.erase(s);
    ++counts["remove"];
  }

  void clone() {
    const SeqId src = any_session();
    const auto len = static_cast<int>(model_[src].size());
    const int upto = pick(0, 3) == 0 ? len : pick(0, len);
    const SeqId dst = t_->clone(src, upto);
    ASSERT_EQ(model_.count(dst), 0u);
    model_[dst].assign(model_[src].begin(), model_[src].begin() + upto);
    ++counts["clone"];
  }

  void rewind() {
    const SeqId s = any_session();
    auto& tags = model_[s];
    const auto len = static_cast<int>(tags.size());
    const int pos = pick(0, 2) == 0 ? pick(0, len) : std::max(0, len - pick(0, 20));
    t_->rewind(s, pos);
    tags.resize(static_cast<size_t>(pos));
    ++counts["rewind"];
  }

  // A random step: a few sessions, each a decode row or a prefill chunk, interleaved.
  void make_step(std::vector<SeqId>& ids, std::vector<int32_t>& pos) {
    std::vector<SeqId> pool;
    for (const auto& [s, tags] : model_) {
      if (tags.size() < 900) pool.push_back(s);
    }
    std::shuffle(pool.begin(), pool.end(), rng_);
    pool.resize(std::min<size_t>(pool.size(), static_cast<size_t>(pick(1, 6))));
    std::vector<std::pair<SeqId, int>> left;
    int budget = 64;
    for (SeqId s : pool) {
      const int n = std::min(budget, pick(0, 9) < 6 ? 1 : pick(2, 40));
      if (n == 0) break;
      budget -= n;
      left.push_back({s, n});
    }
    std::map<SeqId, int32_t> next;
    for (auto& [s, n] : left) next[s] = static_cast<int32_t>(model_[s].size());
    while (!left.empty()) {
      const auto k = static_cast<size_t>(pick(0, static_cast<int>(left.size()) - 1));
      ids.push_back(left[k].first);
      pos.push_back(next[left[k].first]++);
      if (--left[k].second == 0) left.erase(left.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  void step(bool commit, bool inject_fault) {
    std::vector<SeqId> ids;
    std::vector<int32_t> pos;
    make_step(ids, pos);
    if (ids.empty()) return;
    const auto before = capture(*t_, 64);
    if (inject_fault) t_.faulty->fail_nth_growth(1);
    try {
      t_->prepare(ids, pos);
    } catch (const Error& e) {
      t_.faulty->fail_nth_growth(0);
      ASSERT_TRUE(inject_fault) << e.what();
      ASSERT_EQ(e.code(), ErrorCode::OutOfMemory);
      ASSERT_EQ(capture(*t_, 64), before);
      ++counts["failed growth"];
      return;
    }
    t_.faulty->fail_nth_growth(0);
    Model with_step = model_;
    write_step_tags(ids, with_step);
    check_rows(ids, pos, with_step, /*dense=*/false);
    if (commit) {
      t_->commit();
      model_ = std::move(with_step);
      ++counts["commit"];
      return;
    }
    t_->abort();
    auto after = capture(*t_, 64);
    // An abort gives back everything; only capacity the step grew stays (rows and what
    // follows from them: new rows are all free).
    ASSERT_TRUE(std::all_of(after.cell_pos.begin() + static_cast<std::ptrdiff_t>(before.cell_pos.size()),
                            after.cell_pos.end(), [](int32_t p) { return p == kFreeCellPos; }));
    after.cell_pos.resize(before.cell_pos.size());
    after.metrics.rows = before.metrics.rows;
    after.metrics.allocated_bytes = before.metrics.allocated_bytes;
    after.metrics.growth_count = before.metrics.growth_count;
    after.metrics.binding_epoch = before.metrics.binding_epoch;
    after.base = before.base;
    ASSERT_EQ(after, before);
    ++counts["abort"];
  }

  void write_step_tags(const std::vector<SeqId>& ids, Model& with_step) {
    const StepBuffers& step = t_->step();
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint64_t tag = ++last_tag_;
      t_.write_tag(step.cells[i], tag);
      with_step[ids[i]].push_back(tag);
    }
  }

  // Every row of the pending step sees exactly its session's tokens inside each window.
  void check_rows(const std::vector<SeqId>& ids, const std::vector<int32_t>& pos, const Model& expected_tags,
                  bool dense) {
    const StepBuffers& step = t_->step();
    const auto& windows = t_->geometry().windows();
    std::vector<int8_t> mask;
    for (int32_t wi = 0; wi < static_cast<int32_t>(windows.size()); ++wi) {
      const int32_t w = windows[static_cast<size_t>(wi)];
      if (dense) t_->render_dense_mask(wi, mask);
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto cells = kernel_visible_cells(*t_, wi, i, pos[i]);
        std::vector<std::pair<int32_t, uint64_t>> seen, expected;
        for (int64_t c : cells) seen.push_back({t_->cell_pos()[static_cast<size_t>(c)], t_.tag(c)});
        std::sort(seen.begin(), seen.end());
        const auto& tags = expected_tags.at(ids[i]);
        for (int32_t q = w == 0 ? 0 : std::max(0, pos[i] - w + 1); q <= pos[i]; ++q) {
          expected.push_back({q, tags[static_cast<size_t>(q)]});
        }
        ASSERT_EQ(seen, expected) << "row " << i << " of sequence " << ids[i] << " at " << pos[i] << ", window " << w;
        ASSERT_TRUE(cells.empty() || cells.back() < step.read_len);
        if (dense) {
          ASSERT_EQ(testing::dense_visible_cells(mask, step.read_len, i), cells) << "dense mask, row " << i;
          for (int64_t c : cells) {
            const auto owners = t_->owners(c);
            ASSERT_TRUE(std::find(owners.begin(), owners.end(), ids[i]) != owners.end());
          }
        }
      }
    }
  }

  void check_committed_state() {
    const CacheMetrics m = t_->metrics();
    const auto occupied =
        std::count_if(t_->cell_pos().begin(), t_->cell_pos().end(), [](int32_t p) { return p != kFreeCellPos; });
    ASSERT_EQ(m.live_cells, occupied);
    ASSERT_LE(m.shared_cells, m.live_cells);
    ASSERT_GE(m.pages_in_use * t_->config().page_cells, m.live_cells);
    ASSERT_GE(m.peak_live_cells, m.live_cells);
    ASSERT_EQ(m.allocated_bytes, static_cast<size_t>(m.rows) * m.bytes_per_cell);
    ASSERT_EQ(m.sequences, static_cast<int64_t>(model_.size()));
    int64_t history = 0;
    for (const auto& [s, tags] : model_) {
      ASSERT_EQ(t_->length(s), static_cast<int32_t>(tags.size()));
      history += static_cast<int64_t>(tags.size());
    }
    ASSERT_LE(m.live_cells, history);  // sharing can only save cells
  }

  // A decode row for every session, checked and given back.
  void probe(bool dense) {
    std::vector<SeqId> ids;
    std::vector<int32_t> pos;
    for (const auto& [s, tags] : model_) {
      ids.push_back(s);
      pos.push_back(static_cast<int32_t>(tags.size()));
    }
    if (ids.empty()) return;
    t_->prepare(ids, pos);
    Model with_probe = model_;
    write_step_tags(ids, with_probe);
    check_rows(ids, pos, with_probe, dense);
    t_->abort();
  }

  testing::TestCache t_;
  std::mt19937 rng_;
  Model model_;
  uint64_t last_tag_ = 0;
};

void run_workload(int32_t page_cells, uint32_t seed, int operations) {
  RandomWorkload workload(page_cells, seed);
  workload.run(operations);
  if (::testing::Test::HasFatalFailure()) return;
  for (const char* kind : {"create", "commit", "abort", "clone", "rewind", "remove"}) {
    EXPECT_GE(workload.counts[kind], operations / 200) << kind;
  }
  // Injected faults only bite when a step needs growth, which geometric growth makes rare.
  std::cout << "operations by kind:";
  for (const auto& [kind, n] : workload.counts) std::cout << " " << kind << "=" << n;
  std::cout << "\n";
  workload.remove_all_and_check_empty();
}

TEST(KvCellCacheRandom, TenThousandOperationsMatchTheModelPagesOf16) { run_workload(16, 20240611, 10000); }
TEST(KvCellCacheRandom, TenThousandOperationsMatchTheModelPagesOf4) { run_workload(4, 7, 10000); }

}  // namespace
}  // namespace cellm::kv
