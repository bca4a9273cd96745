#include "server/http/http_server.h"

#include <algorithm>
#include <optional>

#include "batching/json_text.h"
#include "core/error.h"
#include "core/log.h"
#include "server/auth.h"
#include "server/completion_response.h"
#include "server/connection_probe.h"
#include "server/sse.h"

namespace cellm::server {
namespace {

using Clock = std::chrono::steady_clock;

// How long a handler waits for its generation before it looks at its connection again.
constexpr std::chrono::milliseconds kPoll{200};
constexpr size_t kMaxBodyBytes = size_t{16} << 20;
constexpr time_t kKeepAliveSeconds = 2;  // idle connections also delay shutdown by this much
constexpr int kMaxDefaultThreads = 1024;

const char* const kJson = "application/json";

void write_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.retry_after_seconds() > 0) res.set_header("Retry-After", std::to_string(e.retry_after_seconds()));
  res.set_content(batching::json_text(e.body()), kJson);
}

// Requests per route; anything else is one label, so strangers cannot grow the metrics.
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})
    if (path == known) return known;
  return "other";
}

ConnectionProbe probe_of(const httplib::Request& req) {
  return ConnectionProbe::find(req.local_port, req.remote_addr, req.remote_port);
}

// Counts a completion response from the handler until it is written out.
class OpenResponse {
 public:
  explicit OpenResponse(std::atomic<int>& count) : count_(count) { ++count_; }
  ~OpenResponse() { --count_; }
  OpenResponse(const OpenResponse&) = delete;
  OpenResponse& operator=(const OpenResponse&) = delete;

 private:
  std::atomic<int>& count_;
};

// The events that close a stream: the finish reason (and usage), or the error; then [DONE].
std::string stream_ending(const batching::GenerationResult& result, const ResponseHead& head, bool include_usage) {
  std::string out;
  if (const std::optional<ApiError> error = generation_error(result)) {
    out = sse_event(error->body());
  } else {
    out = sse_event(finish_chunk(head, *openai_finish_reason(result.finish_reason), include_usage));
    if (include_usage) out += sse_event(usage_chunk(head, usage_of(result)));
  }
  out += kSseDone;
  return out;
}

}  // namespace

// What a streamed response keeps between calls of its content provider.
struct StreamState {
  Generation generation;
  ResponseHead head;
  bool include_usage = false;
  ConnectionProbe probe;
  bool started = false;
  bool ended = false;  // the last event was written, or the client left
  std::unique_ptr<OpenResponse> open;
};

HttpServer::HttpServer(batching::Engine& engine, CompletionService& service, ServerMetrics& metrics,
                       const ServeOptions& options)
    : engine_(engine),
      service_(service),
      metrics_(metrics),
      options_(options),
      started_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
  add_routes();
}

HttpServer::~HttpServer() {
  if (listener_.joinable()) {
    http_.stop();
    listener_.join();
  }
}

void HttpServer::check_auth(const httplib::Request& req) const {
  std::optional<std::string> header;
  if (req.has_header("Authorization")) header = req.get_header_value("Authorization");
  if (std::optional<ApiError> error = check_bearer_token(header, options_.api_key)) throw *error;
}

void HttpServer::add_routes() {
  // Every handler answers errors as OpenAI does, whatever it throws.
  auto guarded = [](auto handler) {
    return [handler](const httplib::Request& req, httplib::Response& res) {
      try {
        handler(req, res);
      } catch (const ApiError& e) {
        write_error(res, e);
      } catch (const std::exception& e) {
        write_error(res, ApiError(500, "server_error", e.what()));
      }
    };
  };
  http_.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(Endpoint::ChatCompletions, req, res);
  }));
  http_.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(Endpoint::Completions, req, res);
  }));
  http_.Get("/v1/models", guarded([this](const httplib::Request& req, httplib::Response& res) {
    check_auth(req);
    res.set_content(batching::json_text(models_response(service_.model_id(), started_)), kJson);
  }));
  http_.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
    // While draining, a load balancer should send new work elsewhere.
    const bool up = service_.accepting();
    res.status = up ? 200 : 503;
    res.set_content(batching::json_text({{"status", up ? "ok" : "shutting down"}}), kJson);
  }));
  http_.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(engine_.runner().metrics()), "text/plain; version=0.0.4; charset=utf-8");
  }));
  // Errors httplib raises itself (no route, body too large, malformed request) get a body too.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = str_cat("HTTP error ", res.status);
    std::optional<std::string> code;
    if (res.status == 404) {
      message = str_cat("no route for ", req.method, " ", req.path);
      code = "not_found";
    } else if (res.status == 413) {
      message = str_cat("the request body is larger than ", kMaxBodyBytes, " bytes");
    }
    res.set_content(batching::json_text(error_body("invalid_request_error", message, std::nullopt, code)), kJson);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(endpoint_label(req.path), res.status);
    log_debug("serve: ", req.method, " ", req.path, " ", res.status);
  });
}

void HttpServer::handle_completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  auto open = std::make_unique<OpenResponse>(open_responses_);
  check_auth(req);
  const CompletionRequest request = parse_completion_request(endpoint, req.body);
  batching::GenerationRequest generation_request = service_.prepare(request);
  const ResponseHead head = new_response_head(endpoint, service_.model_id());
  const Generation generation = service_.start(std::move(generation_request));
  if (!request.stream) {
    answer_whole(generation, head, probe_of(req), res);
    return;
  }
  auto state = std::make_shared<StreamState>();
  state->generation = generation;
  state->head = head;
  state->include_usage = request.include_usage;
  state->probe = probe_of(req);
  state->open = std::move(open);  // the response stays open until the stream is written
  answer_stream(state, res);
}

void HttpServer::answer_stream(const std::shared_ptr<StreamState>& state, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state](size_t, httplib::DataSink& sink) {
        auto client_left = [&] {
          state->ended = true;
          service_.cancel(state->generation);
          metrics_.count_client_disconnect();
          return false;  // abort the response
        };
        if (state->probe.peer_closed()) return client_left();
        std::string out;
        if (!state->started && state->head.endpoint == Endpoint::ChatCompletions)
          out = sse_event(role_chunk(state->head, state->include_usage));
        state->started = true;
        GenerationStream::Update update = state->generation.stream->next(kPoll);
        if (!update.text.empty()) out += sse_event(text_chunk(state->head, update.text, state->include_usage));
        if (update.result) out += stream_ending(*update.result, state->head, state->include_usage);
        if (!out.empty() && !sink.write(out.data(), out.size())) return client_left();
        if (update.result) {
          state->ended = true;
          sink.done();
        }
        return true;
      },
      [this, state](bool) {
        // The listener stopped under the stream, or httplib gave up on it: free the cells.
        if (!state->ended) service_.cancel(state->generation);
        state->open.reset();
      });
}

void HttpServer::answer_whole(const Generation& generation, const ResponseHead& head, const ConnectionProbe& probe,
                              httplib::Response& res) {
  bool client_left = false;
  std::optional<batching::GenerationResult> result;
  while (!result) {
    result = generation.stream->next(kPoll).result;
    if (!result && !client_left && probe.peer_closed()) {
      client_left = true;  // keep waiting: the cancelled result comes back promptly
      service_.cancel(generation);
      metrics_.count_client_disconnect();
    }
  }
  if (client_left) {
    // Nobody reads this; 499 ("client closed request") labels it in the request counts.
    write_error(res, ApiError(499, "invalid_request_error", "the client closed the connection"));
    return;
  }
  if (std::optional<ApiError> error = generation_error(*result)) throw *error;
  res.set_content(batching::json_text(completion_response(head, result->text, *openai_finish_reason(result->finish_reason),
                                                   usage_of(*result))),
                  kJson);
}

int HttpServer::start() {
  const batching::RunnerOptions& runner = engine_.runner().options();
  // One thread per request that may be open at once (running, waiting, a few probes), so the
  // runner's queue bound, not the pool, is what refuses; capped for huge --max-waiting values.
  const int threads = options_.http_threads > 0 ? options_.http_threads
                                                : std::min(runner.max_sessions + runner.max_waiting + 8, kMaxDefaultThreads);
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_.set_keep_alive_timeout(kKeepAliveSeconds);
  http_.set_payload_max_length(kMaxBodyBytes);
  int port = options_.port;
  if (port == 0) port = http_.bind_to_any_port(options_.host);
  else if (!http_.bind_to_port(options_.host, port)) port = -1;
  if (port <= 0)
    fail(ErrorCode::Io, "cannot listen on ", options_.host, ":", options_.port, " (in use, or not an address here)");
  listener_ = std::thread([this] { http_.listen_after_bind(); });
  log_info("serve: listening on http://", options_.host, ":", port, " (model '", service_.model_id(), "', ", threads,
           " HTTP threads", options_.api_key.empty() ? "" : ", API key required", ")");
  return port;
}

void HttpServer::shutdown(std::chrono::duration<double> grace) {
  service_.stop_accepting();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace);
  log_info("serve: shutting down; running generations have ", grace.count(), " s to finish");
  if (!service_.wait_until_idle(deadline)) {
    service_.cancel_all();
    service_.wait_until_idle(Clock::now() + std::chrono::seconds(5));
  }
  // The generations are over; let their handlers write the last bytes before the listener
  // stops (stopping cuts streams short).
  const auto written_by = Clock::now() + std::chrono::seconds(5);
  while (open_responses_.load() > 0 && Clock::now() < written_by) std::this_thread::sleep_for(kPoll / 10);
  http_.stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace cellm::server
