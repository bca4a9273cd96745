#pragma once
// Counters of the engine as a whole (per-generation figures are in GenerationResult).
#include <cstdint>

#include "kv/metrics.h"
#include "runtime/graph_manager.h"
#include "runtime/step_host_times.h"

namespace cellm::batching {

struct EngineMetrics {
  int64_t steps = 0;
  int64_t decode_steps = 0;       // all-decode forwards (the decode program)
  int64_t prefill_steps = 0;      // forwards with prefill slices
  int64_t mixed_steps = 0;        // forwards holding decode rows and prefill slices together
  int64_t failed_steps = 0;
  int64_t prompt_tokens = 0;      // prompt tokens computed (recomputation after preemption too)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t max_rows_in_step = 0;   // most tokens in one forward
  int64_t max_sequences_in_step = 0;
  int64_t sequences_in_steps = 0;  // sequences summed over all forwards (/ steps: sharing)
  int64_t running = 0;            // sessions in the cache now
  int64_t waiting = 0;            // queued, not yet admitted (or preempted)
  int64_t submitted = 0;
  int64_t finished = 0;
  int64_t rejected = 0;           // refused at submit (queue full, bad request)
  double busy_seconds = 0;        // time spent in forwards
  // Between two decode steps in a row: from one forward's return to the next one's start (the
  // tokens emitted, the next step planned), summed, and how many such gaps.
  double decode_gap_seconds = 0;
  int64_t decode_gaps = 0;
  kv::CacheMetrics kv;
  runtime::GraphStats graphs;     // the executor's decode graphs
  runtime::StepHostTimes decode_host;  // the executor's decode steps, phase by phase
};

}  // namespace cellm::batching
