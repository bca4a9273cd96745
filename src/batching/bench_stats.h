#pragma once
// Summary of a set of latencies (benchmark TTFT and inter-token gaps).
#include <cstdint>
#include <vector>

namespace cellm::batching {

struct LatencyStats {
  int64_t count = 0;
  double mean_ms = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

// Percentiles interpolate linearly between the closest ranks (numpy's default), so the p50
// of {1, 2} is 1.5. All zero for an empty set.
LatencyStats latency_stats(std::vector<double> values_ms);

}  // namespace cellm::batching
