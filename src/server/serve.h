#pragma once
// `cellm serve`: the OpenAI-compatible HTTP server over one Engine.
//   POST /v1/chat/completions, POST /v1/completions (streaming as SSE), GET /v1/models,
//   GET /health, GET /metrics (Prometheus text).
// Defined only when cellm is built with cpp-httplib (CELLM_HAVE_HTTP_SERVER == 1).
#include <string>

#include "batching/engine.h"
#include "batching/prompt_formatter.h"

namespace cellm::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (logged)
  std::string api_key;           // empty: no authentication
  int http_threads = 0;          // 0: max_sessions + max_waiting + 8 (at most 1024)
  double grace_seconds = 10;     // on SIGINT/SIGTERM: how long running generations may finish
  std::string model_id;          // the name /v1/models reports and responses carry
  batching::PromptOptions prompt;  // chat template choice, default system message
};

// Serves until SIGINT or SIGTERM, then shuts down gracefully; returns the exit code (0).
// Throws Io when the address cannot be bound.
int serve(batching::Engine& engine, const ServeOptions& options);

}  // namespace cellm::server
