#include "server/server_metrics.h"

namespace cellm::server {

ServerMetrics::ServerMetrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void ServerMetrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
}

void ServerMetrics::observe_time_to_first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_inter_token_latency(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  itl_.observe(seconds);
}

void ServerMetrics::count_client_disconnect() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++disconnects_;
}

std::string ServerMetrics::render(const batching::EngineMetrics& m) const {
  PrometheusText p;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    p.family("cellm_requests_total", "counter", "HTTP requests answered, by endpoint and status code");
    for (const auto& [key, count] : requests_)
      p.sample("cellm_requests_total", {{"endpoint", key.first}, {"status", std::to_string(key.second)}},
               static_cast<double>(count));
    p.histogram("cellm_time_to_first_token_seconds", "Time from submission to the first generated token", ttft_);
    p.histogram("cellm_inter_token_latency_seconds", "Time between consecutive tokens of one generation", itl_);
    p.counter("cellm_client_disconnects_total", "Generations cancelled because their client went away",
              static_cast<double>(disconnects_));
  }
  const auto d = [](auto v) { return static_cast<double>(v); };
  p.counter("cellm_prompt_tokens_total", "Prompt tokens computed (recomputation after preemption included)",
            d(m.prompt_tokens));
  p.counter("cellm_generation_tokens_total", "Tokens generated", d(m.generated_tokens));
  p.counter("cellm_generations_submitted_total", "Generations accepted by the runner", d(m.submitted));
  p.counter("cellm_generations_finished_total", "Generations finished (any reason)", d(m.finished));
  p.counter("cellm_generations_rejected_total", "Generations refused at submission (queue full, bad request)",
            d(m.rejected));
  p.gauge("cellm_sessions_running", "Generations holding cells in the KV cache", d(m.running));
  p.gauge("cellm_sessions_waiting", "Generations queued for admission (or preempted)", d(m.waiting));

  p.counter("cellm_steps_total", "Forwards run", d(m.steps));
  p.counter("cellm_decode_steps_total", "Forwards of decode rows only", d(m.decode_steps));
  p.counter("cellm_prefill_steps_total", "Forwards carrying prompt slices", d(m.prefill_steps));
  p.counter("cellm_mixed_steps_total", "Forwards carrying prompt slices beside decode rows", d(m.mixed_steps));
  p.counter("cellm_failed_steps_total", "Forwards that failed", d(m.failed_steps));
  p.counter("cellm_forward_sequences_total",
            "Sequences summed over all forwards; divided by cellm_steps_total, the sequences that shared a forward",
            d(m.sequences_in_steps));
  p.gauge("cellm_max_sequences_per_forward", "Most sequences in one forward so far", d(m.max_sequences_in_step));
  p.gauge("cellm_max_tokens_per_forward", "Most tokens in one forward so far", d(m.max_rows_in_step));
  p.counter("cellm_forward_seconds_total", "Time spent in forwards", m.busy_seconds);
  p.counter("cellm_preemptions_total", "Generations whose cells were taken back to be recomputed later",
            d(m.preemptions));

  p.gauge("cellm_kv_rows", "KV pool rows allocated (cells of capacity)", d(m.kv.rows));
  p.gauge("cellm_kv_live_cells", "KV cells holding a token of some sequence", d(m.kv.live_cells));
  p.gauge("cellm_kv_peak_live_cells", "The most live KV cells so far", d(m.kv.peak_live_cells));
  p.gauge("cellm_kv_allocated_bytes", "KV pool bytes (rows x bytes per cell)", d(m.kv.allocated_bytes));
  p.gauge("cellm_kv_bytes_per_cell", "Bytes of one KV cell over all layers", d(m.kv.bytes_per_cell));
  p.gauge("cellm_kv_pages_in_use", "KV pages held by some sequence", d(m.kv.pages_in_use));
  p.gauge("cellm_kv_sequences", "Sequences alive in the KV cache", d(m.kv.sequences));
  p.counter("cellm_kv_growths_total", "Times the KV pool grew", d(m.kv.growth_count));

  p.counter("cellm_graph_captures_total", "Decode graphs captured", d(m.graphs.captures));
  p.counter("cellm_graph_recaptures_total", "Decode graphs captured again after the KV pool moved",
            d(m.graphs.recaptures));
  p.counter("cellm_graph_replays_total", "Decode forwards replayed from a graph", d(m.graphs.replays));
  return p.text();
}

}  // namespace cellm::server
