#pragma once
// Between the HTTP handlers and the runner: turns a parsed request into prompt tokens and a
// GenerationRequest (chat template or raw text, limits checked against the per-session
// context), submits it with callbacks that feed a GenerationStream and the metrics, cancels
// on behalf of departed clients, and drains for shutdown (stop accepting, wait, cancel).
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "batching/engine.h"
#include "batching/prompt_formatter.h"
#include "server/completion_request.h"
#include "server/generation_stream.h"
#include "server/server_metrics.h"

namespace cellm::server {

// A submitted generation as its handler holds it.
struct Generation {
  batching::GenerationId id = 0;
  std::shared_ptr<GenerationStream> stream;
};

class CompletionService {
 public:
  // `prompt_options`: chat template choice, default system message (--system).
  CompletionService(batching::Engine& engine, const batching::PromptOptions& prompt_options, std::string model_id,
                    ServerMetrics& metrics);
  ~CompletionService();  // cancels what runs and waits for it: the callbacks point here
  CompletionService(const CompletionService&) = delete;
  CompletionService& operator=(const CompletionService&) = delete;

  const std::string& model_id() const { return model_id_; }

  // Tokenizes the prompt and sets the limits. ApiError 400 for a prompt that does not fit the
  // context (code context_length_exceeded, the limit named) or that the template refuses.
  batching::GenerationRequest prepare(const CompletionRequest& request) const;
  // Submits. ApiError 429 with Retry-After when the waiting queue is full, 503 while the
  // server shuts down, 400 for what the runner refuses as invalid.
  Generation start(batching::GenerationRequest request);
  // The client left: the generation ends Cancelled and its cells are freed.
  void cancel(const Generation& generation);

  // Shutdown: refuse new generations (503), wait up to a deadline for those that run (true
  // when none is left), then cancel what is left (returns how many).
  void stop_accepting();
  bool accepting() const;
  bool wait_until_idle(std::chrono::steady_clock::time_point deadline);
  size_t cancel_all();

 private:
  void ended(batching::GenerationId id);

  batching::Engine& engine_;
  batching::PromptFormatter formatter_;
  std::string default_system_;
  std::string model_id_;
  ServerMetrics& metrics_;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::set<batching::GenerationId> running_;  // submitted, not finished
  int64_t active_ = 0;                        // includes submissions still in flight
  bool accepting_ = true;
};

}  // namespace cellm::server
