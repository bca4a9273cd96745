#pragma once
// What GET /metrics shows: the server's own counters (requests by endpoint and status, time
// to first token and inter-token latency, client disconnects) beside the engine's figures
// (tokens, steps and the sequences they carried, KV pool, sessions, preemptions, graphs).
// Thread-safe: handlers and the engine thread record, the /metrics handler renders.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "batching/engine_metrics.h"
#include "server/prometheus.h"

namespace cellm::server {

class ServerMetrics {
 public:
  ServerMetrics();

  // `endpoint`: a route of this server (unknown paths are counted as "other" by the caller).
  void count_request(const std::string& endpoint, int status);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void count_client_disconnect();

  std::string render(const batching::EngineMetrics& engine) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram ttft_;
  Histogram itl_;
  uint64_t disconnects_ = 0;
};

}  // namespace cellm::server
