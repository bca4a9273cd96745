// `cellm serve`: the OpenAI-compatible HTTP server (server/serve.h) on the batching engine.
#include <CLI/CLI.hpp>
#include <filesystem>

#include "batching/engine.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "server/serve.h"

namespace cellm::cli {
namespace {

struct ServeFlags {
  EngineFlags engine;
  PromptFlags prompt_format;
  server::ServeOptions serve;
  int32_t max_waiting = 64;
};

int run_serve(ServeFlags flags) {
#if CELLM_HAVE_HTTP_SERVER
  batching::EngineOptions options = flags.engine.to_options();
  options.runner.max_waiting = flags.max_waiting;
  batching::Engine engine(options);
  if (flags.serve.model_id.empty()) flags.serve.model_id = std::filesystem::path(options.model_path).stem().string();
  flags.serve.prompt = flags.prompt_format.options;
  return server::serve(engine, flags.serve);
#else
  (void)flags;
  fail(ErrorCode::Unsupported,
       "this cellm was built without the HTTP server: cpp-httplib was not found when it was configured "
       "(install libcpp-httplib-dev and configure again)");
#endif
}

}  // namespace

void add_serve_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<ServeFlags>();
  auto* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (stream: true for SSE), "
      "GET /v1/models, /health and /metrics (Prometheus)");
  cmd->add_option("--host", flags->serve.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", flags->serve.port, "Port to listen on; 0 picks a free one (logged)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", flags->serve.api_key,
                  "Require 'Authorization: Bearer KEY' on the /v1 routes (/health and /metrics stay open)")
      ->envname("CELLM_API_KEY");
  cmd->add_option("--max-waiting", flags->max_waiting,
                  "Requests that may wait for a session beyond --max-sessions; more get 429 with Retry-After")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--http-threads", flags->serve.http_threads,
                  "HTTP worker threads (default: max-sessions + max-waiting + 8, at most 1024: one per request that may be open)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--grace-seconds", flags->serve.grace_seconds,
                  "On SIGINT/SIGTERM, how long running generations may finish before they are cancelled")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--alias", flags->serve.model_id, "Model name for /v1/models and responses (default: the file name)");
  flags->engine.add_to(*cmd, /*batch_flags=*/true);
  flags->prompt_format.add_to(*cmd, /*allow_raw=*/false);
  cmd->callback([flags, &action] { action = [flags] { return run_serve(*flags); }; });
}

}  // namespace cellm::cli
