// `cellm run`: one prompt, its answer streamed to stdout, speed to stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <future>

#include "batching/engine.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/stdout_stream.h"
#include "core/log.h"

namespace cellm::cli {
namespace {

struct RunFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  PromptFlags prompt_format;
  std::string prompt;
  int32_t n_predict = 256;
  bool ignore_eos = false;
};

int run(const RunFlags& flags) {
  batching::EngineOptions options = flags.engine.to_options();
  options.runner.max_sessions = 1;
  batching::Engine engine(options);
  batching::GenerationRequest request;
  request.prompt = batching::PromptFormatter(engine, flags.prompt_format.options).prompt(flags.prompt);
  request.sampling = flags.sampling.to_params();
  request.max_tokens = flags.n_predict;
  request.ignore_eos = flags.ignore_eos;
  std::promise<batching::GenerationResult> done;
  batching::GenerationCallbacks callbacks = stream_to_stdout(done);
  engine.runner().submit(std::move(request), std::move(callbacks));
  const batching::GenerationResult r = done.get_future().get();
  std::printf("\n");
  std::fflush(stdout);
  print_generation_stats(engine, r);
  return r.finish_reason == batching::FinishReason::Failed ? 1 : 0;
}

}  // namespace

void add_run_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand("run", "Answer one prompt: text to stdout, load time and speed to stderr");
  cmd->add_option("-p,--prompt", flags->prompt, "The prompt")->required();
  cmd->add_option("-n,--n-predict", flags->n_predict, "Most tokens to generate")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating past end-of-generation tokens (benchmarks)");
  flags->engine.add_to(*cmd, /*batch_flags=*/false);
  flags->sampling.add_to(*cmd);
  flags->prompt_format.add_to(*cmd);
  cmd->callback([flags, &action] { action = [flags] { return run(*flags); }; });
}

}  // namespace cellm::cli
