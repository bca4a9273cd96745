#include "batching/engine.h"

#include <chrono>

#include "core/log.h"

namespace cellm::batching {

Engine::Engine(const EngineOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  file_ = gguf::File::open(options.model_path);
  backend_ = backend::create_backend(options.backend);
  memory_before_ = backend_->memory_stats();
  log_info("loading ", options.model_path, " on ", backend_->description());
  tokenizer_ = tokenizer::Tokenizer::from_gguf(*file_);
  executor_ = std::make_unique<runtime::Executor>(*backend_, *file_, options.executor);
  runner_ = std::make_unique<Runner>(*executor_, *tokenizer_, options.runner);
  memory_after_ = backend_->memory_stats();
  timings_.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto& c = executor_->model_config();
  log_info("loaded ", c.arch, " (", c.n_layers, " layers, ", executor_->weights_bytes() / 1e6, " MB of weights) in ",
           static_cast<int>(timings_.load_ms), " ms");
}

Engine::~Engine() {
  runner_.reset();  // stop the engine thread before the executor goes
}

}  // namespace cellm::batching
