// `cellm batch`: many prompts at once through the continuous-batching engine, each answer
// printed, a summary to stderr and a JSON report.
#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "batching/engine.h"
#include "batching/report.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/json_file.h"
#include "core/error.h"
#include "core/log.h"

namespace cellm::cli {
namespace {

struct BatchFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  PromptFlags prompt_format;
  std::string prompts_file;
  int32_t n_predict = 128;
  bool ignore_eos = false;
  std::string report;
  bool quiet = false;
};

struct PromptLine {
  std::string text;
  nlohmann::json spec;  // the JSONL object, or null for a plain line
};

std::vector<PromptLine> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::NotFound, "cannot read prompts file '", path, "'");
  std::vector<PromptLine> prompts;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line[line.find_first_not_of(" \t")] != '{') {
      prompts.push_back({line, nullptr});
      continue;
    }
    nlohmann::json spec;
    try {
      spec = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorCode::InvalidArgument, path, ":", line_no, ": not valid JSON: ", e.what());
    }
    if (!spec.is_object() || !spec.contains("prompt") || !spec["prompt"].is_string())
      fail(ErrorCode::InvalidArgument, path, ":", line_no, ": a JSON line needs a string \"prompt\"");
    prompts.push_back({spec["prompt"].get<std::string>(), spec});
  }
  if (prompts.empty()) fail(ErrorCode::InvalidArgument, "prompts file '", path, "' holds no prompt");
  return prompts;
}

// Applies a JSONL line's per-prompt settings over the command's defaults.
batching::GenerationRequest make_request(const BatchFlags& flags, const batching::PromptFormatter& formatter, const PromptLine& p,
                                         size_t index) {
  batching::GenerationRequest r;
  std::optional<bool> raw;
  std::optional<std::string> system;
  SamplingFlags sampling = flags.sampling;
  r.max_tokens = flags.n_predict;
  r.ignore_eos = flags.ignore_eos;
  const nlohmann::json& s = p.spec;
  try {
    if (s.is_object()) {
      if (s.contains("system")) system = s["system"].get<std::string>();
      if (s.contains("raw")) raw = s["raw"].get<bool>();
      if (s.contains("max_tokens")) r.max_tokens = s["max_tokens"].get<int32_t>();
      if (s.contains("ignore_eos")) r.ignore_eos = s["ignore_eos"].get<bool>();
      if (s.contains("temperature")) sampling.temperature = s["temperature"].get<float>();
      if (s.contains("top_k")) sampling.top_k = s["top_k"].get<int32_t>();
      if (s.contains("top_p")) sampling.top_p = s["top_p"].get<float>();
      if (s.contains("min_p")) sampling.min_p = s["min_p"].get<float>();
      if (s.contains("repeat_penalty")) sampling.repeat_penalty = s["repeat_penalty"].get<float>();
      if (s.contains("seed")) sampling.seed = s["seed"].get<uint64_t>();
      if (s.contains("stop")) r.stop_strings = s["stop"].get<std::vector<std::string>>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::InvalidArgument, "prompt ", index + 1, ": a setting has the wrong type: ", e.what());
  }
  r.prompt = formatter.prompt(p.text, raw, system ? &*system : nullptr);
  r.sampling = sampling.to_params();
  r.tag = std::to_string(index);
  return r;
}

int run_batch(const BatchFlags& flags) {
  const std::vector<PromptLine> prompts = read_prompts(flags.prompts_file);
  batching::EngineOptions options = flags.engine.to_options();
  options.runner.max_waiting = std::max<int32_t>(options.runner.max_waiting, static_cast<int32_t>(prompts.size()));
  batching::Engine engine(options);
  std::vector<batching::GenerationRequest> requests;
  const batching::PromptFormatter formatter(engine, flags.prompt_format.options);
  for (size_t i = 0; i < prompts.size(); ++i) requests.push_back(make_request(flags, formatter, prompts[i], i));

  std::mutex mutex;
  std::condition_variable done_cv;
  std::vector<batching::GenerationResult> results(prompts.size());
  size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto& request : requests) {
    const size_t index = std::stoul(request.tag);
    batching::GenerationCallbacks callbacks;
    callbacks.on_finish = [&, index](const batching::GenerationResult& r) {
      std::lock_guard<std::mutex> lock(mutex);
      results[index] = r;
      ++done;
      done_cv.notify_all();
    };
    engine.runner().submit(std::move(request), std::move(callbacks));
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    done_cv.wait(lock, [&] { return done == prompts.size(); });
  }
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  engine.runner().wait_idle();  // the engine's figures settle after the last callback

  int failed = 0;
  int64_t generated = 0;
  nlohmann::json report = batching::engine_json(engine);
  report["generations"] = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const batching::GenerationResult& r = results[i];
    failed += r.finish_reason == batching::FinishReason::Failed;
    generated += static_cast<int64_t>(r.tokens.size());
    if (!flags.quiet) {
      std::printf("--- [%zu] %s\n%s\n", i + 1, prompts[i].text.c_str(), r.text.c_str());
      if (r.finish_reason == batching::FinishReason::Failed) std::printf("(failed: %s)\n", r.error.c_str());
    }
    nlohmann::json g = batching::generation_json(r);
    g["index"] = i;
    g["prompt"] = prompts[i].text;
    if (prompts[i].spec.is_object() && prompts[i].spec.contains("expect")) g["expect"] = prompts[i].spec["expect"];
    report["generations"].push_back(std::move(g));
  }
  report["timings"] = {{"wall_ms", wall_ms},
                       {"generated_tokens", generated},
                       {"generation_tok_s", wall_ms > 0 ? generated / (wall_ms / 1000.0) : 0.0}};
  std::fflush(stdout);
  log_info("batch: ", prompts.size(), " generations (", failed, " failed), ", generated, " tokens in ",
           static_cast<int64_t>(wall_ms), " ms (", static_cast<int64_t>(generated / (wall_ms / 1000.0)),
           " tok/s), ", report["steps"]["total"].get<int64_t>(), " forwards, peak ",
           report["kv"]["peak_live_cells"].get<int64_t>(), " live cells in ", report["kv"]["rows"].get<int64_t>(),
           " rows");
  if (!flags.report.empty()) write_json_file(flags.report, report);
  return failed > 0 ? 1 : 0;
}

}  // namespace

void add_batch_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<BatchFlags>();
  auto* cmd = app.add_subcommand("batch", "Run many prompts together through the continuous-batching engine");
  cmd->add_option("--prompts", flags->prompts_file,
                  "File with one prompt per line, or JSON lines {\"prompt\": ..., \"max_tokens\", \"ignore_eos\", "
                  "\"temperature\", \"top_k\", \"top_p\", \"min_p\", \"repeat_penalty\", \"seed\", \"stop\", "
                  "\"system\", \"raw\", \"expect\"}")
      ->required();
  cmd->add_option("-n,--n-predict", flags->n_predict, "Most tokens per generation (a JSON line's max_tokens wins)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos,
                "Keep generating past end-of-generation tokens, to max_tokens (benchmarks; a JSON line's ignore_eos wins)");
  cmd->add_option("--report", flags->report, "Write the JSON report here");
  cmd->add_flag("-q,--quiet", flags->quiet, "Do not print the generations");
  flags->engine.add_to(*cmd, /*batch_flags=*/true);
  flags->sampling.add_to(*cmd);
  flags->prompt_format.add_to(*cmd);
  cmd->callback([flags, &action] { action = [flags] { return run_batch(*flags); }; });
}

}  // namespace cellm::cli
