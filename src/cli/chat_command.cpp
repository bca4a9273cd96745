// `cellm chat`: an interactive conversation. Each turn re-renders the whole conversation with
// the chat template, and the engine reuses the cached prefix it shares with the previous turn
// (keep_cache / resume_from), so a turn computes only its new tokens.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <future>
#include <iostream>
#include <unistd.h>

#include "batching/engine.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/stdout_stream.h"
#include "core/log.h"

namespace cellm::cli {
namespace {

struct ChatFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  PromptFlags prompt_format;
  int32_t n_predict = 512;
};

int run_chat(const ChatFlags& flags) {
  batching::EngineOptions options = flags.engine.to_options();
  options.runner.max_sessions = 1;
  batching::Engine engine(options);
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) std::fprintf(stderr, "chat: type a message, /reset to start over, /exit or Ctrl-D to quit\n");
  const batching::PromptFormatter formatter(engine, flags.prompt_format.options);
  std::vector<tokenizer::ChatMessage> messages;
  if (!flags.prompt_format.options.system.empty()) messages.push_back({"system", flags.prompt_format.options.system});
  batching::GenerationId previous = 0;
  const batching::SamplingParams sampling = flags.sampling.to_params();
  for (std::string line;;) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    if (line == "/reset") {
      messages.resize(flags.prompt_format.options.system.empty() ? 0 : 1);
      if (previous != 0) engine.runner().release(previous);
      previous = 0;
      continue;
    }
    messages.push_back({"user", line});
    batching::GenerationRequest request;
    request.prompt = formatter.conversation(messages);
    request.sampling = sampling;
    request.max_tokens = flags.n_predict;
    request.keep_cache = true;
    request.resume_from = previous;
    std::promise<batching::GenerationResult> done;
    batching::GenerationCallbacks callbacks = stream_to_stdout(done);
    try {
      previous = engine.runner().submit(std::move(request), std::move(callbacks));
    } catch (const Error& e) {
      log_message(LogLevel::Error, e.what());
      messages.pop_back();
      continue;
    }
    const batching::GenerationResult r = done.get_future().get();
    std::printf("\n");
    std::fflush(stdout);
    if (r.finish_reason == batching::FinishReason::Failed) {
      log_message(LogLevel::Error, r.error);
      messages.pop_back();
      previous = 0;
      continue;
    }
    messages.push_back({"assistant", r.text});
    if (flags.engine.verbose) print_generation_stats(engine, r);
  }
  if (previous != 0) engine.runner().release(previous);
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<ChatFlags>();
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat; the conversation's cache is kept between turns");
  cmd->add_option("-n,--n-predict", flags->n_predict, "Most tokens per answer")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  flags->engine.add_to(*cmd, /*batch_flags=*/false);
  flags->sampling.add_to(*cmd);
  flags->prompt_format.add_to(*cmd, /*allow_raw=*/false);
  cmd->callback([flags, &action] { action = [flags] { return run_chat(*flags); }; });
}

}  // namespace cellm::cli
