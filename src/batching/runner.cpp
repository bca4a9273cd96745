#include "batching/runner.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace cellm::batching {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Session::Session(GenerationId id_, GenerationRequest request_, GenerationCallbacks callbacks_,
                 const tokenizer::Tokenizer& tokenizer)
    : id(id_),
      request(std::move(request_)),
      callbacks(std::move(callbacks_)),
      tokens(request.prompt),
      prompt_len(static_cast<int32_t>(request.prompt.size())),
      sampler(request.sampling),
      decoder(tokenizer),
      stop(request.stop_strings),
      submitted(Clock::now()) {}

Runner::Runner(runtime::Executor& executor, const tokenizer::Tokenizer& tokenizer, RunnerOptions options)
    : executor_(executor),
      tokenizer_(tokenizer),
      options_(options),
      scheduler_(options.max_step_tokens > 0 ? options.max_step_tokens : executor.max_write()) {
  if (options_.max_sessions < 1) fail(ErrorCode::InvalidArgument, "max_sessions must be at least 1");
  if (options_.max_step_tokens > executor.max_write())
    fail(ErrorCode::InvalidArgument, "max_step_tokens ", options_.max_step_tokens, " exceeds the executor's max_write ",
         executor.max_write());
  if (options_.max_step_tokens <= 0) options_.max_step_tokens = executor.max_write();
  if (options_.context_length <= 0) options_.context_length = executor.model_config().context_length;
  if (options_.max_waiting < 1) options_.max_waiting = 1;
  thread_ = std::thread([this] { loop(); });
}

Runner::~Runner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

GenerationId Runner::submit(GenerationRequest request, GenerationCallbacks callbacks) {
  auto reject = [&](ErrorCode code, auto&&... parts) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++rejected_count_;
    }
    fail(code, parts...);
  };
  if (request.prompt.empty()) reject(ErrorCode::InvalidArgument, "the prompt is empty");
  if (request.max_tokens < 1) reject(ErrorCode::InvalidArgument, "max_tokens must be at least 1");
  const int32_t vocab = executor_.vocab_size();
  for (int32_t t : request.prompt)
    if (t < 0 || t >= vocab) reject(ErrorCode::InvalidArgument, "prompt token ", t, " is outside the vocabulary");
  if (static_cast<int64_t>(request.prompt.size()) >= options_.context_length)
    reject(ErrorCode::LimitExceeded, "the prompt has ", request.prompt.size(), " tokens; the context length is ",
           options_.context_length, " (prompt and output together)");
  try {
    request.sampling.validate();
  } catch (const Error& e) {
    reject(e.code(), e.what());
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // Counted at submission, not from the engine's last published queue length: generations
  // submitted together while the engine is busy are all counted, and one that will start at once
  // (a session is free) is not refused as if it had to wait.
  if (unfinished_ >= static_cast<int64_t>(options_.max_sessions) + options_.max_waiting) {
    ++rejected_count_;
    lock.unlock();
    fail(ErrorCode::LimitExceeded, "the waiting queue is full (", options_.max_waiting, " generations)");
  }
  const GenerationId id = next_id_++;
  submitted_.push_back(std::make_unique<Session>(id, std::move(request), std::move(callbacks), tokenizer_));
  ++submitted_count_;
  ++unfinished_;
  busy_ = true;
  lock.unlock();
  wake_.notify_all();
  return id;
}

void Runner::cancel(GenerationId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_all();
}

void Runner::release(GenerationId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    releases_.push_back(id);
  }
  wake_.notify_all();
}

void Runner::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return !busy_ && submitted_.empty(); });
}

EngineMetrics Runner::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineMetrics m = snapshot_;
  m.submitted = submitted_count_;
  m.rejected = rejected_count_;
  m.waiting += static_cast<int64_t>(submitted_.size());
  return m;
}

void Runner::set_step_hook(std::function<void(int64_t)> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_hook_ = std::move(hook);
}

void Runner::set_sample_hook(std::function<void(GenerationId)> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  sample_hook_ = std::move(hook);
}

void Runner::publish_metrics() {
  metrics_.running = static_cast<int64_t>(running_.size());
  metrics_.waiting = static_cast<int64_t>(waiting_.size());
  metrics_.kv = executor_.cache().metrics();
  metrics_.graphs = executor_.stats().graphs;
  metrics_.decode_host = executor_.stats().decode_host;
  std::lock_guard<std::mutex> lock(mutex_);
  snapshot_ = metrics_;
}

void Runner::loop() {
  for (;;) {
    std::vector<GenerationId> cancels, releases;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || !submitted_.empty() || !cancels_.empty() || !releases_.empty() || !waiting_.empty() ||
               !running_.empty();
      });
      if (stop_) break;
      while (!submitted_.empty()) {
        waiting_.push_back(std::move(submitted_.front()));
        submitted_.pop_front();
      }
      cancels.swap(cancels_);
      releases.swap(releases_);
      step_hook_copy_ = step_hook_;
      sample_hook_copy_ = sample_hook_;
    }
    for (GenerationId id : releases) {
      auto it = parked_.find(id);
      if (it == parked_.end()) continue;
      executor_.cache().remove(it->second.seq);
      parked_.erase(it);
    }
    for (GenerationId id : cancels) {
      for (auto* list : {&running_}) {
        for (auto& s : *list)
          if (s->id == id && !s->finished) finish(*s, FinishReason::Cancelled);
      }
      for (auto& s : waiting_)
        if (s->id == id && !s->finished) finish(*s, FinishReason::Cancelled);
    }
    drop_finished();
    admit();
    if (!running_.empty()) run_one_step();
    drop_finished();
    publish_metrics();
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_.empty() && waiting_.empty() && submitted_.empty()) {
      busy_ = false;
      idle_.notify_all();
    }
  }
  // Shutting down: whatever is left ends as cancelled; parked sequences are freed.
  while (evict_parked()) {
  }
  for (auto& s : running_)
    if (!s->finished) finish(*s, FinishReason::Cancelled);
  for (auto& s : waiting_)
    if (!s->finished) finish(*s, FinishReason::Cancelled);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : submitted_) {
      GenerationResult r;
      r.id = s->id;
      r.tag = s->request.tag;
      r.finish_reason = FinishReason::Cancelled;
      r.prompt_tokens = s->prompt_len;
      if (s->callbacks.on_finish) s->callbacks.on_finish(r);
    }
    submitted_.clear();
  }
  drop_finished();
  publish_metrics();
  std::lock_guard<std::mutex> lock(mutex_);
  busy_ = false;
  idle_.notify_all();
}

std::vector<kv::Demand> Runner::demands_of(const StepPlan& plan) const {
  std::vector<kv::Demand> demands;
  demands.reserve(plan.slices.size());
  for (const PlannedSlice& slice : plan.slices) demands.push_back({slice.session->seq, slice.count});
  return demands;
}

void Runner::admit() {
  kv::CellCache& cache = executor_.cache();
  // With nothing running no generation will end to give cells back: try growing again.
  if (running_.empty()) growth_refused_ = false;
  while (static_cast<int32_t>(running_.size()) < options_.max_sessions && !waiting_.empty()) {
    Session& s = *waiting_.front();
    // The running sessions' decode rows plus this session's first slice must fit in what the
    // pool can still grow to; otherwise new work waits.
    std::vector<kv::Demand> demands;
    for (const auto& r : running_)
      if (r->pending() == 1) demands.push_back({r->seq, 1});
    demands.push_back({kv::kNewSequence, std::min(s.pending(), options_.max_step_tokens)});
    while (!fits(demands) && evict_parked()) {
    }
    if (!fits(demands)) {
      demands.back().tokens = 1;
      if (!running_.empty() || !fits(demands)) {
        if (running_.empty())
          finish(s, FinishReason::Failed,
                 str_cat("the KV pool limit (", cache.config().max_rows, " rows) cannot hold even one token"));
        break;
      }
    }
    if (s.request.resume_from != 0 && s.cached == 0 && parked_.count(s.request.resume_from)) resume(s);
    if (s.seq < 0) s.seq = cache.create();
    s.admitted_order = admissions_++;
    if (!s.scheduled_once) {
      s.scheduled_once = true;
      s.first_scheduled = Clock::now();
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  drop_finished();
}

void Runner::resume(Session& s) {
  auto it = parked_.find(s.request.resume_from);
  Parked parked = std::move(it->second);
  parked_.erase(it);
  // Reuse the longest common prefix; at least one prompt token stays pending so the first
  // forward of this generation yields its logits.
  const size_t limit = std::min(parked.tokens.size(), s.tokens.size() - 1);
  size_t common = 0;
  while (common < limit && parked.tokens[common] == s.tokens[common]) ++common;
  kv::CellCache& cache = executor_.cache();
  if (common == 0) {
    cache.remove(parked.seq);
    return;
  }
  try {
    if (common < parked.tokens.size()) cache.rewind(parked.seq, static_cast<int32_t>(common));
  } catch (const Error&) {
    cache.remove(parked.seq);  // rewinding a shared page needs room we do not have: start over
    return;
  }
  s.seq = parked.seq;
  s.cached = static_cast<int32_t>(common);
  s.reused = s.cached;
}

bool Runner::fits(const std::vector<kv::Demand>& demands) const {
  const kv::CellCache& cache = executor_.cache();
  if (!cache.can_fit(demands)) return false;
  if (!growth_refused_) return true;
  const kv::CacheMetrics m = cache.metrics();
  return cache.pages_needed(demands) <= m.rows / cache.config().page_cells - m.pages_in_use;
}

bool Runner::evict_parked() {
  if (parked_.empty()) return false;
  executor_.cache().remove(parked_.begin()->second.seq);
  parked_.erase(parked_.begin());
  return true;
}

void Runner::preempt(Session& s) {
  executor_.cache().remove(s.seq);
  s.seq = -1;
  s.cached = 0;
  ++s.preemptions;
  ++metrics_.preemptions;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &s; });
  waiting_.push_front(std::move(*it));  // first in line when memory frees up
  running_.erase(it);
}

bool Runner::run_one_step() {
  kv::CellCache& cache = executor_.cache();
  auto live_running = [&] {
    std::vector<Session*> out;
    for (auto& s : running_)
      if (!s->finished) out.push_back(s.get());
    return out;
  };
  auto plan_fits = [&](const StepPlan& p) { return fits(demands_of(p)); };
  auto youngest = [&]() -> Session* {
    Session* y = nullptr;
    for (auto& s : running_)
      if (!s->finished && (y == nullptr || s->admitted_order > y->admitted_order)) y = s.get();
    return y;
  };
  std::vector<Session*> running = live_running();
  StepPlan plan = scheduler_.plan(running);
  while ((!plan_fits(plan) || plan.tokens == 0) && evict_parked()) {
  }
  while (!scheduler_.trim_to_fit(plan, plan_fits) || plan.tokens == 0) {
    // Even the decode rows do not fit (or nothing fits at all): free the youngest session.
    Session* victim = youngest();
    if (victim == nullptr) return false;
    if (running.size() == 1 && growth_refused_) {
      growth_refused_ = false;  // alone it cannot wait for others: try growing once more
      plan = scheduler_.plan(running);
      continue;
    }
    if (running.size() == 1) {
      finish(*victim, FinishReason::Failed,
             str_cat("the KV pool limit (", cache.config().max_rows, " rows) is too small for this generation (",
                     victim->tokens.size(), " tokens)"));
      return false;
    }
    preempt(*victim);
    running = live_running();
    plan = scheduler_.plan(running);
  }

  std::vector<int32_t> tokens, positions, logit_rows;
  std::vector<kv::SeqId> seq_ids;
  std::vector<Session*> logit_owner;
  int64_t prompt_tokens = 0;
  for (const PlannedSlice& slice : plan.slices) {
    Session& s = *slice.session;
    for (int32_t j = 0; j < slice.count; ++j) {
      const int32_t pos = s.cached + j;
      tokens.push_back(s.tokens[pos]);
      positions.push_back(pos);
      seq_ids.push_back(s.seq);
      if (pos < s.prompt_len) ++prompt_tokens;
    }
    if (s.cached + slice.count == static_cast<int32_t>(s.tokens.size())) {
      logit_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
      logit_owner.push_back(&s);
    }
  }

  // When every generation that gets a token picks it greedily, only the argmax of each row
  // crosses from the device, not whole rows of logits.
  bool greedy = true;
  for (const Session* s : logit_owner) greedy = greedy && s->sampler.is_plain_greedy();
  runtime::StepResult result;
  const bool has_prefill = plan.slices.size() > static_cast<size_t>(plan.decode_rows);
  const auto started = Clock::now();
  if (!has_prefill && decode_returned_) {
    metrics_.decode_gap_seconds += std::chrono::duration<double>(started - *decode_returned_).count();
    ++metrics_.decode_gaps;
  }
  decode_returned_.reset();
  try {
    if (step_hook_copy_) step_hook_copy_(metrics_.steps + metrics_.failed_steps);
    result = executor_.run({tokens, positions, seq_ids, logit_rows,
                            greedy ? runtime::StepOutput::Argmax : runtime::StepOutput::Logits});
  } catch (const Error& e) {
    ++metrics_.failed_steps;
    if (e.code() == ErrorCode::LimitExceeded || e.code() == ErrorCode::OutOfMemory) {
      // The pool could not grow after all (an allocation failed): make room and try again.
      log_warn("forward refused (", e.what(), "); preempting the youngest generation");
      if (e.code() == ErrorCode::OutOfMemory) growth_refused_ = true;
      Session* victim = youngest();
      if (victim != nullptr && running.size() > 1) preempt(*victim);
      else if (victim != nullptr) finish(*victim, FinishReason::Failed, e.what());
      return false;
    }
    for (const PlannedSlice& slice : plan.slices) finish(*slice.session, FinishReason::Failed, e.what());
    return false;
  } catch (const std::exception& e) {
    ++metrics_.failed_steps;
    for (const PlannedSlice& slice : plan.slices) finish(*slice.session, FinishReason::Failed, e.what());
    return false;
  }
  const auto returned = Clock::now();
  metrics_.busy_seconds += std::chrono::duration<double>(returned - started).count();
  if (!has_prefill) decode_returned_ = returned;
  ++metrics_.steps;
  if (!has_prefill) ++metrics_.decode_steps;
  else ++metrics_.prefill_steps;
  if (has_prefill && plan.decode_rows > 0) ++metrics_.mixed_steps;
  metrics_.prompt_tokens += prompt_tokens;
  metrics_.max_rows_in_step = std::max<int64_t>(metrics_.max_rows_in_step, plan.tokens);
  metrics_.max_sequences_in_step = std::max<int64_t>(metrics_.max_sequences_in_step, plan.slices.size());
  metrics_.sequences_in_steps += static_cast<int64_t>(plan.slices.size());
  for (const PlannedSlice& slice : plan.slices) {
    Session& s = *slice.session;
    if (s.cached < s.prompt_len) {
      ++s.prefill_steps;
      // Decode rows of other generations rode in the same forward.
      if (plan.decode_rows > 0) ++s.prefill_steps_beside_decodes;
    }
    s.cached += slice.count;
  }
  pick_and_emit(logit_owner, result, greedy);
  return true;
}

void Runner::pick_and_emit(const std::vector<Session*>& owners, const runtime::StepResult& result, bool greedy) {
  // A failure here (the sampler, a callback) is that generation's alone: its cells, which hold
  // the forward's tokens, are freed with it, and the others still get their tokens. Escaping,
  // it would end the engine thread and the process.
  struct Pick {
    int32_t token = -1;
    std::string error;
  };
  std::vector<Pick> picks(owners.size());
  for (size_t k = 0; k < owners.size(); ++k) {
    try {
      if (sample_hook_copy_) sample_hook_copy_(owners[k]->id);  // the test hook: engine thread
    } catch (const std::exception& e) {
      picks[k].error = e.what();
    }
  }
  // Each session draws from its own generator, so drawing side by side changes no token.
  const auto vocab = static_cast<size_t>(executor_.vocab_size());
  auto pick = [&](int64_t k, int) {
    Pick& p = picks[static_cast<size_t>(k)];
    if (!p.error.empty()) return;
    Session& s = *owners[static_cast<size_t>(k)];
    try {
      p.token = greedy ? result.argmax[static_cast<size_t>(k)]
                       : s.sampler.sample(result.logits.subspan(static_cast<size_t>(k) * vocab, vocab), s.tokens);
    } catch (const std::exception& e) {
      p.error = e.what();
    }
  };
  if (greedy || owners.size() < 2) {
    for (size_t k = 0; k < owners.size(); ++k) pick(static_cast<int64_t>(k), 0);
  } else {
    if (sampling_threads_ == nullptr) sampling_threads_ = executor_.backend().host_threads();
    if (sampling_threads_ == nullptr) {
      constexpr int kMostSamplingThreads = 8;  // a step draws at most a few hundred tokens
      own_sampling_threads_ = std::make_unique<ThreadPool>(std::min(ThreadPool::hardware_threads(), kMostSamplingThreads));
      sampling_threads_ = own_sampling_threads_.get();
    }
    sampling_threads_->parallel_for(static_cast<int64_t>(owners.size()), pick);
  }
  for (size_t k = 0; k < owners.size(); ++k) {
    Session& s = *owners[k];
    if (!picks[k].error.empty()) {
      finish(s, FinishReason::Failed, picks[k].error);
      continue;
    }
    try {
      emit_token(s, picks[k].token);
    } catch (const std::exception& e) {
      finish(s, FinishReason::Failed, e.what());
    }
  }
}

void Runner::emit_token(Session& s, int32_t token) {
  const auto now = Clock::now();
  if (s.generated() > 0) {
    const double gap = ms_between(s.last_token, now);
    s.itl_sum_ms += gap;
    s.itl_max_ms = std::max(s.itl_max_ms, gap);
  } else {
    s.first_token_ms = ms_between(s.submitted, now);
  }
  s.last_token = now;
  const bool eos = !s.request.ignore_eos && tokenizer_.is_end_of_generation(token);
  if (eos || std::find(s.request.stop_tokens.begin(), s.request.stop_tokens.end(), token) != s.request.stop_tokens.end()) {
    finish(s, FinishReason::Stop);
    return;
  }
  s.tokens.push_back(token);
  ++metrics_.generated_tokens;
  const std::string out = s.stop.push(s.decoder.push(token));
  s.text += out;
  if (s.callbacks.on_token) s.callbacks.on_token(s.id, token, out);
  if (s.stop.stopped()) finish(s, FinishReason::Stop);
  else if (s.generated() >= s.request.max_tokens) finish(s, FinishReason::Length);
  else if (static_cast<int32_t>(s.tokens.size()) >= options_.context_length) finish(s, FinishReason::Length);
}

void Runner::finish(Session& s, FinishReason reason, const std::string& error) {
  if (s.finished) return;
  s.finished = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --unfinished_;
  }
  if (s.in_cache()) {
    growth_refused_ = false;  // cells come back (or stay parked, evictable): growth may work now
    if (s.request.keep_cache && (reason == FinishReason::Stop || reason == FinishReason::Length)) {
      parked_[s.id] = {s.seq, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.cached)};
    } else {
      executor_.cache().remove(s.seq);
    }
    s.seq = -1;
  }
  if (!s.stop.stopped()) {
    const std::string tail = s.stop.push(s.decoder.finish()) + s.stop.flush();
    if (!tail.empty()) {
      s.text += tail;
      if (s.callbacks.on_token) s.callbacks.on_token(s.id, -1, tail);
    }
  }
  GenerationResult r;
  r.id = s.id;
  r.tag = s.request.tag;
  r.finish_reason = reason;
  r.error = error;
  r.text = s.text;
  r.tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
  r.prompt_tokens = s.prompt_len;
  r.reused_prompt_tokens = s.reused;
  r.seed = s.sampler.seed();
  const auto now = Clock::now();
  r.timings.queue_ms = s.scheduled_once ? ms_between(s.submitted, s.first_scheduled) : ms_between(s.submitted, now);
  r.timings.ttft_ms = s.generated() > 0 || s.first_token_ms > 0 ? s.first_token_ms : 0;
  r.timings.total_ms = ms_between(s.submitted, now);
  const int32_t gaps = s.generated() - 1;
  r.timings.mean_itl_ms = gaps > 0 ? s.itl_sum_ms / gaps : 0;
  r.timings.max_itl_ms = s.itl_max_ms;
  r.timings.preemptions = s.preemptions;
  r.timings.prefill_steps = s.prefill_steps;
  r.timings.prefill_steps_beside_decodes = s.prefill_steps_beside_decodes;
  ++metrics_.finished;
  if (reason == FinishReason::Failed) log_warn("generation ", s.id, " failed: ", error);
  if (s.callbacks.on_finish) s.callbacks.on_finish(r);
}

void Runner::drop_finished() {
  std::erase_if(running_, [](const auto& s) { return s->finished; });
  std::erase_if(waiting_, [](const auto& s) { return s->finished; });
}

}  // namespace cellm::batching
