#pragma once
// The JSON of `cellm bench --json` (schema "cellm.bench/1"): the engine's report (model,
// backend, options, load time, KV pool, memory, steps) plus the date, the benchmark settings
// and one entry per batch size (with the rate generation streamed the weights a decode step
// reads, decode_weight_bytes: weight_stream_gb_s). scripts/plot-bench reads it.
#include <nlohmann/json.hpp>

#include "batching/bench.h"

namespace cellm::batching {

inline constexpr const char* kBenchSchema = "cellm.bench/1";

nlohmann::json latency_json(const LatencyStats& stats);
nlohmann::json bench_point_json(const BenchPoint& point, size_t decode_weight_bytes);
nlohmann::json bench_json(Engine& engine, const BenchResult& result);

}  // namespace cellm::batching
