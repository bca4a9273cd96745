// Property: the two renderings of visibility agree. For random cache states and steps, the
// dense mask (built from the cell table by the rule of DESIGN.md section 4) marks exactly the
// cells a kernel finds through the page lists and the cell_pos test, for every row and window.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "kv/cell_cache.h"
#include "kv_test_support.h"

namespace cellm::kv {
namespace {

using testing::dense_visible_cells;
using testing::kernel_visible_cells;
using testing::make_cache;
using testing::windows_geometry;

struct Trial {
  int32_t page_cells;
  uint32_t seed;
};

std::string trial_name(const ::testing::TestParamInfo<Trial>& trial) {
  std::ostringstream name;
  name << "P" << trial.param.page_cells << "_seed" << trial.param.seed;
  return name.str();
}

class DenseMaskProperty : public ::testing::TestWithParam<Trial> {};

void check_page_lists_shape(const CellCache& cache, const std::vector<int32_t>& pos) {
  const StepBuffers& step = cache.step();
  const int32_t P = cache.config().page_cells;
  EXPECT_EQ(step.read_len % P, 0);
  for (const WindowPages& wp : step.windows) {
    ASSERT_EQ(wp.page_rows.size(), pos.size() + 1);
    for (size_t i = 0; i < pos.size(); ++i) {
      const int32_t count = wp.page_rows[i + 1] - wp.page_rows[i];
      if (wp.window > 0) {
        EXPECT_LE(count, (wp.window - 1 + P - 1) / P + 1);
      }
      // Listed in ascending order of the positions they hold.
      int32_t previous_first = -1;
      for (int32_t e = wp.page_rows[i]; e < wp.page_rows[i + 1]; ++e) {
        const int32_t page = wp.pages[static_cast<size_t>(e)];
        EXPECT_LT((page + 1) * P, step.read_len + 1);
        int32_t first = kFreeCellPos;
        for (int32_t c = page * P; c < (page + 1) * P; ++c)
          first = std::min(first, cache.cell_pos()[static_cast<size_t>(c)]);
        EXPECT_GT(first, previous_first);
        previous_first = first;
      }
    }
  }
}

TEST_P(DenseMaskProperty, DenseMaskAndPageListsAgree) {
  const Trial trial = GetParam();
  std::mt19937 rng(trial.seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto t = make_cache(windows_geometry({0, 3, 4, 17, 512}),
                      {.page_cells = trial.page_cells, .initial_rows = 32, .max_write = 256});
  std::vector<SeqId> live;
  int checked_rows = 0;
  for (int round = 0; round < 400; ++round) {
    // Shape the state: new sessions, clones, rewinds, removals.
    if (live.size() < 3 || pick(0, 4) == 0) live.push_back(t->create());
    if (pick(0, 3) == 0) {
      const SeqId src = live[static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1))];
      live.push_back(t->clone(src, pick(0, t->length(src))));
    }
    if (pick(0, 3) == 0) {
      const SeqId s = live[static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1))];
      t->rewind(s, pick(0, t->length(s)));
    }
    if (live.size() > 8) {
      const auto k = static_cast<size_t>(pick(0, static_cast<int>(live.size()) - 1));
      t->remove(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    // A step over a few sessions, each one to a few dozen tokens, in order per session.
    std::vector<SeqId> ids;
    std::vector<int32_t> pos;
    for (SeqId s : live) {
      if (pick(0, 2) == 0 || t->length(s) > 1500) continue;
      const int n = pick(0, 1) == 0 ? 1 : pick(2, 20);
      for (int i = 0; i < n; ++i) {
        ids.push_back(s);
        pos.push_back(t->length(s) + i);
      }
    }
    if (ids.empty()) continue;
    t->prepare(ids, pos);
    check_page_lists_shape(*t, pos);
    std::vector<int8_t> mask;
    for (int32_t wi = 0; wi < t->geometry().window_count(); ++wi) {
      t->render_dense_mask(wi, mask);
      ASSERT_EQ(mask.size(), ids.size() * static_cast<size_t>(t->step().read_len));
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(dense_visible_cells(mask, t->step().read_len, i), kernel_visible_cells(*t, wi, i, pos[i]))
            << "round " << round << ", row " << i << " (sequence " << ids[i] << ", position " << pos[i] << "), window "
            << t->geometry().windows()[static_cast<size_t>(wi)];
        ++checked_rows;
      }
    }
    if (pick(0, 4) == 0) {
      t->abort();
    } else {
      t->commit();
    }
  }
  EXPECT_GT(checked_rows, 1000);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, DenseMaskProperty,
                         ::testing::Values(Trial{1, 1}, Trial{4, 2}, Trial{16, 3}, Trial{16, 4}, Trial{32, 5}),
                         trial_name);

}  // namespace
}  // namespace cellm::kv
