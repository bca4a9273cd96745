#include "batching/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cellm::batching {
namespace {

// `sorted` is not empty; q in [0, 1].
double percentile(const std::vector<double>& sorted, double q) {
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (rank - static_cast<double>(below));
}

}  // namespace

LatencyStats latency_stats(std::vector<double> values) {
  LatencyStats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  s.mean_ms = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50_ms = percentile(values, 0.50);
  s.p99_ms = percentile(values, 0.99);
  s.max_ms = values.back();
  return s;
}

}  // namespace cellm::batching
