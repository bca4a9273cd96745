#pragma once
// Everything one model needs to serve generations, loaded once: the mapped GGUF file, a
// backend, the executor (programs, weights, KV cache), the tokenizer and the runner. Front
// ends (run, chat, batch, serve, bench) create one Engine and submit to its runner.
#include <memory>
#include <string>

#include "backend/factory.h"
#include "batching/runner.h"
#include "gguf/file.h"
#include "runtime/executor.h"
#include "tokenizer/tokenizer.h"

namespace cellm::batching {

struct EngineOptions {
  std::string model_path;
  backend::BackendOptions backend;
  runtime::ExecutorOptions executor;
  RunnerOptions runner;
};

struct LoadTimings {
  double load_ms = 0;  // mapping, parsing, tokenizer, programs, weight placement, KV pool
};

class Engine {
 public:
  // Loads the model; logs progress to stderr. Throws on any failure (file, format, backend).
  explicit Engine(const EngineOptions& options);
  ~Engine();

  Runner& runner() { return *runner_; }
  runtime::Executor& executor() { return *executor_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::File& file() const { return *file_; }
  backend::Backend& backend() { return *backend_; }
  const LoadTimings& load_timings() const { return timings_; }
  const backend::MemoryStats& memory_before_load() const { return memory_before_; }
  const backend::MemoryStats& memory_after_load() const { return memory_after_; }

 private:
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<runtime::Executor> executor_;
  std::unique_ptr<Runner> runner_;
  LoadTimings timings_;
  backend::MemoryStats memory_before_, memory_after_;
};

}  // namespace cellm::batching
