#include "cli/engine_flags.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/default_model.h"
#include "core/log.h"

namespace cellm::cli {

void EngineFlags::add_to(CLI::App& cmd, bool batch_flags) {
  cmd.add_option("-m,--model", model, "GGUF model file (default: SmolLM2-135M-Instruct from models/)");
  cmd.add_option("--backend", backend, "cpu, cuda or auto (CUDA when a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd.add_option("--numerics", numerics,
                 "cellm: cellm's arithmetic (same tokens on CPU and GPU, in any batch); ggml, ggml-avx2, "
                 "ggml-avx512: llama.cpp's CPU arithmetic, bit for bit, as built here / for AVX2 / for AVX-512 "
                 "(CPU only, slower)")
      ->check(CLI::IsMember({"cellm", "ggml", "ggml-avx2", "ggml-avx512"}))
      ->capture_default_str();
  cmd.add_option("-t,--threads", threads, "CPU threads (default: all cores)");
  cmd.add_option("-c,--ctx-size", context, "Context length per session, prompt and output (default: the model's)");
  cmd.add_flag("-v,--verbose", verbose, "Log more about loading and scheduling");
  cmd.add_option("--cuda-graph", cuda_graph, "Capture decode steps as CUDA graphs (on the CUDA backend)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  auto* step = cmd.add_option("--max-step-tokens", max_step_tokens,
                              "Most tokens in one forward (prompt slices and decode rows)")
                   ->check(CLI::Range(1, 8192))
                   ->capture_default_str();
  auto* page = cmd.add_option("--kv-page-cells", kv_page_cells, "Cells per KV page")
                   ->check(CLI::Range(1, 4096))
                   ->capture_default_str();
  auto* initial = cmd.add_option("--kv-initial-rows", kv_initial_rows, "Initial KV pool rows (cells)")
                      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32))
                      ->capture_default_str();
  auto* max_rows = cmd.add_option("--kv-max-rows", kv_max_rows, "Most KV pool rows the pool may grow to (default: no limit)")
                       ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  if (batch_flags) {
    cmd.add_option("--max-sessions", max_sessions, "Generations running at once")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
  } else {
    for (auto* option : {step, page, initial, max_rows}) option->group("Advanced");
  }
}

batching::EngineOptions EngineFlags::to_options() const {
  if (verbose) set_log_level(LogLevel::Debug);
  batching::EngineOptions o;
  o.model_path = resolve_model_path(model);
  o.backend.name = backend;
  o.backend.threads = threads;
  o.backend.numerics = numerics;
  o.executor.max_write = max_step_tokens;
  o.executor.max_decode_batch = std::min(max_step_tokens, 256);
  o.executor.cache.page_cells = kv_page_cells;
  o.executor.cache.initial_rows = kv_initial_rows;
  if (kv_max_rows > 0) o.executor.cache.max_rows = kv_max_rows;
  o.runner.max_sessions = max_sessions;
  o.runner.max_step_tokens = max_step_tokens;
  o.runner.context_length = context;
  o.executor.max_context = context;
  o.executor.graphs = cuda_graph == "on";
  return o;
}

void SamplingFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--temp", temperature, "Sampling temperature; 0 = greedy")->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  cmd.add_option("--top-k", top_k, "Keep the k most likely tokens; 0 = off")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd.add_option("--top-p", top_p, "Nucleus sampling threshold; 1 = off")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd.add_option("--min-p", min_p, "Drop tokens below min-p x the top probability; 0 = off")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd.add_option("--repeat-penalty", repeat_penalty, "Penalty for recently seen tokens; 1 = off")->check(CLI::PositiveNumber)->capture_default_str();
  cmd.add_option("--repeat-last-n", repeat_last_n, "How many recent tokens the penalty looks at")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd.add_option("-s,--seed", seed, "Random seed (default: random; printed with the stats)");
}

batching::SamplingParams SamplingFlags::to_params() const {
  batching::SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repeat_penalty = repeat_penalty;
  p.repeat_last_n = repeat_last_n;
  p.seed = seed;
  p.validate();
  return p;
}

void PromptFlags::add_to(CLI::App& cmd, bool allow_raw) {
  std::string names;
  for (const auto& n : tokenizer::ChatTemplate::names()) names += (names.empty() ? "" : ", ") + n;
  if (allow_raw) {
    auto* raw_flag = cmd.add_flag("--raw", options.raw, "Use the prompt as is, without the chat template");
    cmd.add_flag("--chat", [this](int64_t) { options.raw = false; }, "Apply the model's chat template (the default)")
        ->excludes(raw_flag);
  }
  cmd.add_option("--system", options.system, "System message for the chat template");
  cmd.add_option("--chat-template", options.template_name,
                 "Chat template to use instead of the model's (" + names + ")");
  cmd.add_flag("--default-system", options.default_system,
               "When no --system is given, write the system turn the model's template supplies (SmolLM2: 'You are "
               "a helpful AI assistant named SmolLM...'); off by default, as in llama.cpp's built-in templates");
}

void print_generation_stats(const batching::Engine& engine, const batching::GenerationResult& r) {
  const double prefill_ms = r.timings.ttft_ms - r.timings.queue_ms;
  const int32_t computed = r.prompt_tokens - r.reused_prompt_tokens;
  const double gen_ms = r.timings.total_ms - r.timings.ttft_ms;
  const auto n = static_cast<double>(r.tokens.size());
  const std::string cached =
      r.reused_prompt_tokens > 0 ? " (" + std::to_string(r.reused_prompt_tokens) + " cached)" : std::string();
  std::fprintf(stderr,
               "load %.0f ms | prompt %d tokens%s, %.1f tok/s | generation %zu tokens, %.1f tok/s | %s | seed %llu\n",
               engine.load_timings().load_ms, r.prompt_tokens, cached.c_str(),
               prefill_ms > 0 ? computed / (prefill_ms / 1000.0) : 0.0, r.tokens.size(),
               gen_ms > 0 && n > 1 ? (n - 1) / (gen_ms / 1000.0) : 0.0, batching::finish_reason_name(r.finish_reason),
               static_cast<unsigned long long>(r.seed));
}

}  // namespace cellm::cli
