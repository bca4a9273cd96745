#include "server/serve.h"

#include "core/log.h"
#include "server/completion_service.h"
#include "server/http/http_server.h"
#include "server/server_metrics.h"
#include "server/shutdown_signal.h"

namespace cellm::server {

int serve(batching::Engine& engine, const ServeOptions& options) {
  install_shutdown_signals();
  ServerMetrics metrics;
  CompletionService service(engine, options.prompt, options.model_id, metrics);
  HttpServer http(engine, service, metrics, options);
  http.start();
  wait_for_shutdown_signal();
  http.shutdown(std::chrono::duration<double>(options.grace_seconds));
  log_info("serve: stopped");
  return 0;
}

}  // namespace cellm::server
