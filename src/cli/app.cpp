#include "cli/app.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace cellm::cli {

int main(int argc, char** argv) {
  CLI::App app{"cellm: LLM inference over GGUF models with an off-graph KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cellm 0.1.0");
  CommandAction action;
  add_run_command(app, action);
  add_chat_command(app, action);
  add_batch_command(app, action);
  add_serve_command(app, action);
  add_inspect_command(app, action);
  add_tokenize_command(app, action);
  add_bench_command(app, action);
  add_mkmodel_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return action();
  } catch (const Error& e) {
    log_message(LogLevel::Error, e.what());
    return e.code() == ErrorCode::InvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    log_message(LogLevel::Error, e.what());
    return 1;
  }
}

}  // namespace cellm::cli
