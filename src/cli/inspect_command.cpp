#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace cellm::cli {

void add_inspect_command(CLI::App& app, CommandAction& action) {
  auto* cmd = app.add_subcommand("inspect", "Describe a GGUF model: architecture, hyperparameters, tokenizer, tensors");
  cmd->callback([&action] { action = [] { return 0; }; });
}

}  // namespace cellm::cli
