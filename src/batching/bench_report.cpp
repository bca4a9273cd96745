#include "batching/bench_report.h"

#include <ctime>

#include "batching/report.h"

namespace cellm::batching {
namespace {

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

nlohmann::json latency_json(const LatencyStats& s) {
  return {{"count", s.count}, {"mean", s.mean_ms}, {"p50", s.p50_ms}, {"p99", s.p99_ms}, {"max", s.max_ms}};
}

// Microseconds a decode step, phase by phase (runtime/step_host_times.h), and the engine's
// time between two decode steps.
nlohmann::json decode_host_json(const BenchPoint& p) {
  const runtime::StepHostTimes& t = p.decode_host;
  const double per_step = t.steps > 0 ? 1e6 / static_cast<double>(t.steps) : 0.0;
  return {{"steps", t.steps},
          {"inputs", t.inputs_s * per_step},
          {"launch", t.launch_s * per_step},
          {"wait", t.wait_s * per_step},
          {"executor", t.total_s * per_step},
          {"engine_gap", p.decode_gap_us}};
}

nlohmann::json bench_point_json(const BenchPoint& p, size_t decode_weight_bytes) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const BenchRound& r : p.rounds)
    rounds.push_back({{"prefill_ms", r.prefill_ms},
                      {"decode_ms", r.decode_ms},
                      {"decode_tokens", r.decode_tokens},
                      {"prompt_tok_s", r.prompt_tok_s},
                      {"generation_tok_s", r.generation_tok_s}});
  return {{"batch", p.batch},
          {"prompt_tokens", p.prompt_tokens},
          {"generated_tokens", p.generated_tokens},
          {"prompt_tok_s", p.prompt_tok_s},
          {"generation_tok_s", p.generation_tok_s},
          {"weight_stream_gb_s", weight_stream_gb_s(p, decode_weight_bytes)},
          {"ttft_ms", latency_json(p.ttft)},
          {"itl_ms", latency_json(p.itl)},
          {"steps", p.steps},
          {"preemptions", p.preemptions},
          {"decode_host_us", decode_host_json(p)},
          {"rounds", std::move(rounds)}};
}

nlohmann::json bench_json(Engine& engine, const BenchResult& result) {
  nlohmann::json j = engine_json(engine);
  j["schema"] = kBenchSchema;
  j["date"] = utc_now_iso8601();
  const model::ModelConfig& model = engine.executor().model_config();
  j["architecture"] = model.arch;
  if (const std::string* name = engine.file().find_string("general.name")) j["model_name"] = *name;
  const BenchConfig& c = result.config;
  j["bench"] = {{"prompt_tokens", c.prompt_tokens}, {"generated_tokens", c.generated_tokens},
                {"batch_sizes", c.batch_sizes},     {"repetitions", c.repetitions},
                {"seed", c.seed},                   {"warmup", c.warmup},
                {"temperature", c.temperature},     {"top_k", c.top_k},
                {"top_p", c.top_p},                 {"min_p", c.min_p},
                {"warmup_ms", result.warmup_ms}};
  const size_t weight_bytes = engine.executor().decode_weight_bytes();
  j["decode_weight_bytes"] = weight_bytes;
  j["results"] = nlohmann::json::array();
  for (const BenchPoint& p : result.points) j["results"].push_back(bench_point_json(p, weight_bytes));
  return j;
}

}  // namespace cellm::batching
