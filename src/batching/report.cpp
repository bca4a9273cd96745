#include "batching/report.h"

#include "core/process_memory.h"

namespace cellm::batching {

nlohmann::json generation_json(const GenerationResult& r) {
  nlohmann::json g;
  g["id"] = r.id;
  if (!r.tag.empty()) g["tag"] = r.tag;
  g["text"] = r.text;
  g["tokens"] = r.tokens;
  g["n_tokens"] = r.tokens.size();
  g["prompt_tokens"] = r.prompt_tokens;
  g["finish_reason"] = finish_reason_name(r.finish_reason);
  if (!r.error.empty()) g["error"] = r.error;
  g["seed"] = r.seed;
  g["timings"] = {{"queue_ms", r.timings.queue_ms},   {"ttft_ms", r.timings.ttft_ms},
                  {"total_ms", r.timings.total_ms},   {"mean_itl_ms", r.timings.mean_itl_ms},
                  {"max_itl_ms", r.timings.max_itl_ms}, {"preemptions", r.timings.preemptions},
                  {"prefill_steps", r.timings.prefill_steps},
                  {"prefill_steps_beside_decodes", r.timings.prefill_steps_beside_decodes}};
  return g;
}

namespace {

// The host's time in the executor's decode steps, phase by phase (runtime/step_host_times.h),
// and the engine's between two decode steps in a row: summed, in seconds.
nlohmann::json decode_host_seconds_json(const EngineMetrics& m) {
  const runtime::StepHostTimes& t = m.decode_host;
  return {{"steps", t.steps},         {"inputs", t.inputs_s},
          {"launch", t.launch_s},     {"wait", t.wait_s},
          {"executor", t.total_s},    {"engine_gaps", m.decode_gaps},
          {"engine_gap", m.decode_gap_seconds}};
}

}  // namespace

nlohmann::json engine_json(Engine& engine) {
  const EngineMetrics m = engine.runner().metrics();
  const runtime::Executor& ex = engine.executor();
  const kv::CellCacheConfig& cache = ex.cache().config();
  nlohmann::json j;
  j["model"] = engine.file().name();
  j["backend"] = engine.backend().description();
  j["kv"] = {{"rows", m.kv.rows},
             {"live_cells", m.kv.live_cells},
             {"peak_live_cells", m.kv.peak_live_cells},
             {"bytes_per_cell", m.kv.bytes_per_cell},
             {"allocated_bytes", m.kv.allocated_bytes},
             {"growth_count", m.kv.growth_count},
             {"initial_rows", cache.initial_rows},
             {"max_rows", cache.max_rows},
             {"page_cells", cache.page_cells},
             {"pages_in_use", m.kv.pages_in_use},
             {"shared_cells", m.kv.shared_cells},
             {"binding_epoch", m.kv.binding_epoch}};
  j["weights_bytes"] = ex.weights_bytes();
  j["tensor_bytes"] = engine.file().tensor_bytes();
  const ResidentMemory rss = resident_memory();
  const backend::MemoryStats now = engine.backend().memory_stats();
  j["memory"] = {{"resident_bytes", rss.rss},
                 {"peak_resident_bytes", rss.peak_rss},
                 {"resident_weight_bytes", mapped_file_resident_bytes(engine.file().name())},
                 {"device_total_bytes", now.device_total},
                 {"device_used_before_load", engine.memory_before_load().device_used},
                 {"device_used_after_load", engine.memory_after_load().device_used},
                 {"backend_allocated_bytes", now.allocated},
                 {"backend_peak_allocated_bytes", now.peak_allocated}};
  j["steps"] = {{"total", m.steps},
                {"decode", m.decode_steps},
                {"prefill", m.prefill_steps},
                {"mixed", m.mixed_steps},
                {"failed", m.failed_steps},
                {"max_tokens_in_step", m.max_rows_in_step},
                {"max_sequences_in_step", m.max_sequences_in_step},
                {"preemptions", m.preemptions},
                {"prompt_tokens", m.prompt_tokens},
                {"generated_tokens", m.generated_tokens},
                {"busy_seconds", m.busy_seconds},
                {"decode_host_seconds", decode_host_seconds_json(m)}};
  const runtime::GraphStats& g = m.graphs;
  j["graphs"] = {{"enabled", ex.graphs_enabled()},
                 {"captures", g.captures},
                 {"recaptures", g.recaptures},
                 {"replays", g.replays},
                 {"eager_decode_steps", g.eager_decode_steps},
                 {"invalidations", g.invalidations},
                 {"failures", g.failures}};

  const RunnerOptions& ro = engine.runner().options();
  j["options"] = {{"max_sessions", ro.max_sessions},
                  {"max_step_tokens", ro.max_step_tokens},
                  {"context_length", ro.context_length},
                  {"max_waiting", ro.max_waiting}};
  j["load_ms"] = engine.load_timings().load_ms;
  return j;
}

}  // namespace cellm::batching
