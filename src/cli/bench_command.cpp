// `cellm bench`: prompt and generation throughput, TTFT and inter-token latency at several
// batch sizes (batching/bench.h says what is measured and how the warm-up works); a table to
// stdout, optionally the JSON and a PNG plot drawn by scripts/plot-bench.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "batching/bench.h"
#include "batching/bench_report.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/json_file.h"
#include "core/error.h"
#include "core/log.h"

extern char** environ;

namespace cellm::cli {
namespace {

struct BenchFlags {
  EngineFlags engine;
  batching::BenchConfig config;
  std::string json_path;
  std::string plot_path;
  bool no_warmup = false;
  // Set when the user gave them; otherwise bench sizes them for the largest batch.
  const CLI::Option* max_sessions = nullptr;
  const CLI::Option* max_step_tokens = nullptr;
  const CLI::Option* kv_initial_rows = nullptr;
};

// The engine options for the benchmark: every generation of the largest batch runs at once,
// a forward holds at least one row per generation, and unless told otherwise the KV pool starts
// large enough for the largest batch, so no measurement pays for growing it.
batching::EngineOptions engine_options(const BenchFlags& flags) {
  EngineFlags engine = flags.engine;
  const int32_t largest = *std::max_element(flags.config.batch_sizes.begin(), flags.config.batch_sizes.end());
  if (flags.max_sessions->count() == 0) engine.max_sessions = std::max(largest, 1);
  if (flags.max_step_tokens->count() == 0) engine.max_step_tokens = std::max(512, largest);
  else if (engine.max_step_tokens < largest)
    log_warn("bench: --max-step-tokens ", engine.max_step_tokens, " < batch ", largest,
             ": one forward cannot hold a decode row of every generation");
  if (flags.kv_initial_rows->count() == 0) {
    const int64_t cells = int64_t{flags.config.prompt_tokens} + flags.config.generated_tokens;
    const int64_t pages = (cells + engine.kv_page_cells - 1) / engine.kv_page_cells;
    engine.kv_initial_rows = std::max<int64_t>(engine.kv_initial_rows, largest * pages * engine.kv_page_cells);
    if (engine.kv_max_rows > 0) engine.kv_initial_rows = std::min(engine.kv_initial_rows, engine.kv_max_rows);
  }
  batching::EngineOptions options = engine.to_options();
  options.runner.max_waiting = std::max(options.runner.max_waiting, largest);
  return options;
}

void print_table(batching::Engine& engine, const batching::BenchResult& result) {
  const batching::BenchConfig& c = result.config;
  const size_t weight_bytes = engine.executor().decode_weight_bytes();
  const bool gigabytes = weight_bytes >= 1'000'000'000;
  std::printf("model %s | backend %s | prompt %d tokens, %d generated per sequence, %d round%s per batch size | "
              "a decode step reads %.*f %s of weights\n\n",
              engine.file().name().c_str(), engine.backend().description().c_str(), c.prompt_tokens,
              c.generated_tokens, c.repetitions, c.repetitions == 1 ? "" : "s", gigabytes ? 3 : 1,
              static_cast<double>(weight_bytes) / (gigabytes ? 1e9 : 1e6), gigabytes ? "GB" : "MB");
  std::printf("| %5s | %12s | %12s | %10s | %10s | %10s | %9s | %9s | %9s | %12s |\n", "batch", "prompt tok/s",
              "gen tok/s", "TTFT mean", "TTFT p50", "TTFT max", "ITL mean", "ITL p50", "ITL p99", "weights GB/s");
  std::printf("| ----: | -----------: | -----------: | ---------: | ---------: | ---------: | --------: | --------: | "
              "--------: | -----------: |\n");
  for (const batching::BenchPoint& p : result.points)
    std::printf("| %5d | %12.1f | %12.1f | %7.1f ms | %7.1f ms | %7.1f ms | %6.2f ms | %6.2f ms | %6.2f ms | %12.1f |\n",
                p.batch, p.prompt_tok_s, p.generation_tok_s, p.ttft.mean_ms, p.ttft.p50_ms, p.ttft.max_ms,
                p.itl.mean_ms, p.itl.p50_ms, p.itl.p99_ms, batching::weight_stream_gb_s(p, weight_bytes));
  std::fflush(stdout);
}

// The project's .venv python (which scripts/bootstrap fills with tests/py/requirements.txt,
// matplotlib included) when there is one, else python3 from PATH.
std::string plot_python(const std::filesystem::path& source_dir) {
  const std::filesystem::path venv = source_dir / ".venv" / "bin" / "python";
  return std::filesystem::exists(venv) ? venv.string() : "python3";
}

// Runs scripts/plot-bench on the JSON; it explains itself on stderr when it fails.
void plot(const std::string& json_path, const std::string& png_path) {
  const std::filesystem::path source_dir = CELLM_SOURCE_DIR;
  const std::filesystem::path script = source_dir / "scripts" / "plot-bench";
  if (!std::filesystem::exists(script)) fail(ErrorCode::NotFound, "cannot plot: '", script.string(), "' is missing");
  std::string python = plot_python(source_dir);
  std::string script_arg = script.string(), json_arg = json_path, out_flag = "-o", png_arg = png_path;
  std::vector<char*> argv = {python.data(), script_arg.data(), json_arg.data(), out_flag.data(), png_arg.data(), nullptr};
  std::fflush(stdout);
  pid_t pid = 0;
  if (const int err = posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ); err != 0)
    fail(ErrorCode::NotFound, "cannot plot: cannot start '", python, "': ", std::strerror(err));
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) fail(ErrorCode::Io, "cannot plot: waiting for '", python, "' failed");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(ErrorCode::Unsupported, "cannot plot: '", python, " ", script.string(), "' failed (",
         WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : std::string("killed"), ")");
}

int run_bench(const BenchFlags& flags) {
  batching::BenchConfig config = flags.config;
  config.warmup = !flags.no_warmup;
  batching::Engine engine(engine_options(flags));
  const batching::BenchResult result = batching::run_benchmark(engine, config);
  print_table(engine, result);
  const nlohmann::json report = batching::bench_json(engine, result);
  if (!flags.json_path.empty()) write_json_file(flags.json_path, report);
  if (!flags.plot_path.empty()) {
    std::string json_path = flags.json_path;
    const bool temporary = json_path.empty();
    if (temporary) {
      json_path = (std::filesystem::temp_directory_path() / ("cellm-bench-" + std::to_string(::getpid()) + ".json")).string();
      write_json_file(json_path, report);
    }
    try {
      plot(json_path, flags.plot_path);
    } catch (...) {
      if (temporary) std::filesystem::remove(json_path);
      throw;
    }
    if (temporary) std::filesystem::remove(json_path);
    log_info("bench: plot written to ", flags.plot_path);
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Measure prompt and generation throughput, TTFT and inter-token latency at several batch sizes. Each batch "
      "size b submits b generations at once (synthetic seeded prompts, greedy unless --temp, exactly -n tokens each). A warm-up "
      "first (one full-length prompt, then a short round per batch size) keeps one-time costs (weights paged in, "
      "buffers sized, CUDA graphs captured) out of the figures. Unless given, --max-sessions is the largest batch, "
      "--max-step-tokens max(512, largest batch) and --kv-initial-rows what the largest batch needs. 'weights GB/s' "
      "is the rate generation streamed the weights a decode step reads (gen tok/s / batch x those bytes): at batch 1, "
      "over the GPU's HBM read rate (bench_cuda_hbm_read), the fraction of the decode roofline reached");
  batching::BenchConfig& c = flags->config;
  cmd->add_option("-p,--n-prompt", c.prompt_tokens, "Prompt tokens per generation")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", c.generated_tokens, "Tokens generated per generation")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-b,--batch", c.batch_sizes, "Batch sizes, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", c.repetitions, "Rounds per batch size (the figures pool them)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("-s,--seed", c.seed, "Seed of the synthetic prompts and of the samplers")->capture_default_str();
  cmd->add_option("--temp", c.temperature, "Sampling temperature; 0 = greedy (then only each row's argmax leaves the device)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-k", c.top_k, "Keep the k most likely tokens; 0 = off")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-p", c.top_p, "Nucleus sampling threshold; 1 = off")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--min-p", c.min_p, "Drop tokens below min-p x the top probability; 0 = off")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_flag("--no-warmup", flags->no_warmup, "Measure from a cold start");
  cmd->add_option("--json", flags->json_path, "Write the results as JSON (schema cellm.bench/1) here");
  cmd->add_option("--plot", flags->plot_path,
                  "Draw throughput and latency against batch size into this PNG (runs scripts/plot-bench; needs "
                  "matplotlib: scripts/bootstrap installs it into .venv)");
  flags->engine.add_to(*cmd, /*batch_flags=*/true);
  flags->max_sessions = cmd->get_option("--max-sessions");
  flags->max_step_tokens = cmd->get_option("--max-step-tokens");
  flags->kv_initial_rows = cmd->get_option("--kv-initial-rows");
  cmd->callback([flags, &action] { action = [flags] { return run_bench(*flags); }; });
}

}  // namespace cellm::cli
