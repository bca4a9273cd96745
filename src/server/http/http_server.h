#pragma once
// The HTTP front of `cellm serve` on cpp-httplib: routes, authentication, streaming and the
// listener's lifecycle. Handlers run on a pool of HTTP threads and block on their
// generation's stream while the runner's engine thread does the work.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "batching/engine.h"
#include "server/api_error.h"
#include "server/completion_response.h"
#include "server/completion_service.h"
#include "server/connection_probe.h"
#include "server/serve.h"
#include "server/server_metrics.h"

namespace cellm::server {

struct StreamState;  // what a streamed response keeps between writes

class HttpServer {
 public:
  HttpServer(batching::Engine& engine, CompletionService& service, ServerMetrics& metrics, const ServeOptions& options);
  ~HttpServer();  // stops the listener if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts listening on a thread of its own; returns the bound port. Throws Io.
  int start();
  // Stops taking generations (503 from now on), lets running ones finish for up to `grace`,
  // cancels the rest, waits for their responses to be written, then stops the listener.
  void shutdown(std::chrono::duration<double> grace);

 private:
  void add_routes();
  void handle_completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void answer_whole(const Generation& generation, const ResponseHead& head, const ConnectionProbe& probe,
                    httplib::Response& res);
  void answer_stream(const std::shared_ptr<StreamState>& state, httplib::Response& res);
  void check_auth(const httplib::Request& req) const;

  batching::Engine& engine_;
  CompletionService& service_;
  ServerMetrics& metrics_;
  ServeOptions options_;
  int64_t started_;  // Unix seconds: the "created" of the model in /v1/models
  httplib::Server http_;
  std::thread listener_;
  std::atomic<int> open_responses_{0};  // completion responses not yet fully written
};

}  // namespace cellm::server
