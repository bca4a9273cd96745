#pragma once
// Each subcommand lives in its own file and registers its options here; the chosen one sets
// `action`, which app.cpp runs after parsing.
#include <functional>

namespace CLI {
class App;
}

namespace cellm::cli {

using CommandAction = std::function<int()>;

void add_inspect_command(CLI::App& app, CommandAction& action);
void add_run_command(CLI::App& app, CommandAction& action);
void add_batch_command(CLI::App& app, CommandAction& action);
void add_chat_command(CLI::App& app, CommandAction& action);
void add_tokenize_command(CLI::App& app, CommandAction& action);
void add_serve_command(CLI::App& app, CommandAction& action);
void add_bench_command(CLI::App& app, CommandAction& action);
void add_mkmodel_command(CLI::App& app, CommandAction& action);

}  // namespace cellm::cli
