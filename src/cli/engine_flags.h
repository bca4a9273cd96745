#pragma once
// The flags every model-running command shares (-m, --backend, --threads, -c, cache and batch
// sizes) and the sampling flags, registered on a subcommand and turned into options.
#include <cstdint>
#include <optional>
#include <string>

#include "batching/engine.h"
#include "batching/prompt_formatter.h"
#include "batching/sampler.h"

namespace CLI {
class App;
}

namespace cellm::cli {

struct EngineFlags {
  std::string model;
  std::string backend = "auto";
  std::string numerics = "cellm";
  int threads = 0;
  int32_t context = 0;
  int32_t max_step_tokens = 512;
  int32_t max_sessions = 16;
  int64_t kv_initial_rows = 512;
  int64_t kv_max_rows = 0;
  int32_t kv_page_cells = 16;
  std::string cuda_graph = "on";
  bool verbose = false;

  // `batch_flags`: the batching knobs (--max-sessions, --max-step-tokens, --kv-*) are shown.
  void add_to(CLI::App& cmd, bool batch_flags);
  batching::EngineOptions to_options() const;
};

struct SamplingFlags {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  std::optional<uint64_t> seed;

  void add_to(CLI::App& cmd);
  batching::SamplingParams to_params() const;
};

// --raw / --chat, --system, --chat-template, --default-system.
struct PromptFlags {
  batching::PromptOptions options;
  void add_to(CLI::App& cmd, bool allow_raw = true);
};

// "load 40 ms | prompt 14 tokens, 310.2 tok/s | generation 57 tokens, 71.5 tok/s | stop | seed ..." to stderr.
void print_generation_stats(const batching::Engine& engine, const batching::GenerationResult& result);

}  // namespace cellm::cli
