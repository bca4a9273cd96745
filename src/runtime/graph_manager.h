#pragma once
// Decides, for each decode bucket, whether a step runs eagerly, is captured into a graph, or
// replays the bucket's graph (DESIGN.md §5): a bucket runs eagerly for a few warm-up steps
// (first-use costs - cuBLAS heuristics, lazy module loading - stay out of the graph), is then
// captured, and replayed from then on. When the KV pool moves (copy-growth changes the binding
// epoch) every graph is stale: all are released at once, idle buckets too, and each bucket
// warms up and is captured again when next used. In-place (VMM) growth keeps the epoch, so
// nothing is recaptured. A capture that fails is logged and its bucket stays eager: never a
// wrong answer.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace cellm::runtime {

struct GraphStats {
  int64_t captures = 0;     // first captures of a bucket
  int64_t recaptures = 0;   // captures of a bucket whose earlier graph went stale
  int64_t replays = 0;
  int64_t eager_decode_steps = 0;  // warm-ups and buckets that cannot be captured
  int64_t invalidations = 0;       // times every graph was released because the pool moved
  int64_t failures = 0;            // captures that failed (those buckets run eagerly)
};

class GraphManager {
 public:
  GraphManager(backend::Backend& backend, int32_t buckets, int32_t warmups);

  // Runs decode bucket `bucket` through `record` (which issues the forward's kernels), as an
  // eager run, a capture followed by a launch, or a replay. `epoch` is the KV binding epoch.
  void run(int32_t bucket, uint64_t epoch, const std::function<void()>& record);
  const GraphStats& stats() const { return stats_; }

 private:
  struct Slot {
    std::unique_ptr<backend::Graph> graph;
    int32_t warmups = 0;
    bool captured_before = false;
    bool failed = false;
  };
  void invalidate_all();

  backend::Backend& backend_;
  int32_t warmups_;
  std::vector<Slot> slots_;
  uint64_t epoch_ = 0;
  bool have_epoch_ = false;
  GraphStats stats_;
};

}  // namespace cellm::runtime
