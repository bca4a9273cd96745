#include "server/completion_service.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "core/log.h"
#include "server/api_error.h"

namespace cellm::server {
namespace {

using Clock = std::chrono::steady_clock;

// Completions send raw text, so the formatter must tolerate a model without a chat template;
// chat requests then get the template's error.
batching::PromptOptions tolerant(batching::PromptOptions options) {
  options.raw = true;
  return options;
}

const char* prompt_param(const CompletionRequest& r) {
  return r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
}

}  // namespace

CompletionService::CompletionService(batching::Engine& engine, const batching::PromptOptions& prompt_options,
                                     std::string model_id, ServerMetrics& metrics)
    : engine_(engine),
      formatter_(engine, tolerant(prompt_options)),
      default_system_(prompt_options.system),
      model_id_(std::move(model_id)),
      metrics_(metrics) {}

CompletionService::~CompletionService() {
  stop_accepting();
  cancel_all();
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return active_ == 0; });
}

batching::GenerationRequest CompletionService::prepare(const CompletionRequest& r) const {
  batching::GenerationRequest g;
  try {
    if (r.endpoint == Endpoint::ChatCompletions) {
      std::vector<tokenizer::ChatMessage> messages = r.messages;
      const bool has_system = std::any_of(messages.begin(), messages.end(), [](const auto& m) { return m.role == "system"; });
      if (!default_system_.empty() && !has_system) messages.insert(messages.begin(), {"system", default_system_});
      g.prompt = formatter_.conversation(messages);
    } else if (r.has_token_prompt()) {
      g.prompt = r.prompt_tokens;
    } else {
      g.prompt = formatter_.prompt(r.prompt, /*raw=*/true);
    }
  } catch (const Error& e) {
    reject_field(prompt_param(r), e.what());
  }
  const int32_t vocab = engine_.executor().vocab_size();
  for (int32_t t : g.prompt)
    if (t >= vocab) reject_field("prompt", "prompt token ", t, " is outside the vocabulary (", vocab, " tokens)");
  if (g.prompt.empty()) reject_field(prompt_param(r), "the prompt is empty");

  const auto prompt_len = static_cast<int64_t>(g.prompt.size());
  const int32_t context = engine_.runner().options().context_length;
  if (prompt_len >= context)
    throw ApiError(400, "invalid_request_error",
                   str_cat("the prompt has ", prompt_len, " tokens but the context length is ", context,
                           " tokens per session, prompt and output together (-c/--ctx-size); shorten the prompt"),
                   prompt_param(r), "context_length_exceeded");
  const int64_t pool_rows = engine_.executor().cache().config().max_rows;
  if (pool_rows > 0 && prompt_len >= pool_rows)
    throw ApiError(400, "invalid_request_error",
                   str_cat("the prompt has ", prompt_len, " tokens but the KV pool holds at most ", pool_rows,
                           " (--kv-max-rows)"),
                   prompt_param(r), "context_length_exceeded");
  // Without max_tokens a generation runs to its end-of-generation token or the context.
  const int64_t room = context - prompt_len;
  g.max_tokens = static_cast<int32_t>(std::min<int64_t>(r.max_tokens.value_or(std::numeric_limits<int32_t>::max()), room));
  g.sampling = r.sampling;
  g.stop_strings = r.stop;
  return g;
}

Generation CompletionService::start(batching::GenerationRequest request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_)
      throw ApiError(503, "server_error", "the server is shutting down", std::nullopt, "shutting_down", 1);
    ++active_;
  }
  Generation g;
  g.stream = std::make_shared<GenerationStream>();
  batching::GenerationCallbacks callbacks;
  callbacks.on_token = [this, stream = g.stream, last = std::optional<Clock::time_point>()](
                           batching::GenerationId, int32_t token, const std::string& text) mutable {
    if (token >= 0) {  // -1: text held back until the end, no new token
      const auto now = Clock::now();
      if (last) metrics_.observe_inter_token_latency(std::chrono::duration<double>(now - *last).count());
      last = now;
    }
    stream->push_text(text);
  };
  callbacks.on_finish = [this, stream = g.stream](const batching::GenerationResult& r) {
    if (r.timings.ttft_ms > 0) metrics_.observe_time_to_first_token(r.timings.ttft_ms / 1000.0);
    stream->finish(r);
    ended(r.id);
  };
  try {
    g.id = engine_.runner().submit(std::move(request), std::move(callbacks));
  } catch (const Error& e) {
    ended(0);
    // prepare() checked the prompt against the context, so a limit here is the queue.
    if (e.code() == ErrorCode::LimitExceeded)
      throw ApiError(429, "rate_limit_error", str_cat("the server is busy: ", e.what(), "; retry later"), std::nullopt,
                     "queue_full", 1);
    if (e.code() == ErrorCode::InvalidArgument) throw ApiError(400, "invalid_request_error", e.what());
    throw ApiError(500, "server_error", e.what());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // on_finish may already have run (a cancel racing the submit); then there is nothing to track.
  if (!g.stream->finished()) running_.insert(g.id);
  return g;
}

void CompletionService::ended(batching::GenerationId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.erase(id);
    --active_;
  }
  idle_.notify_all();
}

void CompletionService::cancel(const Generation& generation) { engine_.runner().cancel(generation.id); }

void CompletionService::stop_accepting() {
  std::lock_guard<std::mutex> lock(mutex_);
  accepting_ = false;
}

bool CompletionService::accepting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return accepting_;
}

bool CompletionService::wait_until_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_until(lock, deadline, [&] { return active_ == 0; });
}

size_t CompletionService::cancel_all() {
  std::set<batching::GenerationId> ids;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ids = running_;
  }
  for (batching::GenerationId id : ids) engine_.runner().cancel(id);
  if (!ids.empty()) log_info("serve: cancelled ", ids.size(), " unfinished generations");
  return ids.size();
}

}  // namespace cellm::server
