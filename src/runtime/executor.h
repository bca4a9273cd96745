#pragma once
// The executor ("the delegate", DESIGN.md §5): owns a model's Programs (prefill, and decode
// per batch bucket), its weights as placed on a backend, the activation arena and the cell
// cache, and runs one forward at a time as
//     prepare (cache places cells, grows)  ->  bind  ->  forward  ->  commit
// with abort on any failure, so a failed forward never advances a sequence or leaks a cell.
// It is the only caller of prepare/commit/abort.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "gguf/file.h"
#include "kv/cell_cache.h"
#include "model/config.h"
#include "model/program.h"

namespace cellm::runtime {

struct ExecutorOptions {
  int32_t max_write = 512;         // most tokens in one forward (prefill programs)
  int32_t max_decode_batch = 256;  // largest decode bucket; buckets are 1, 2, 4, ... up to it
  kv::CellCacheConfig cache;       // page size, initial and max rows (max_write is taken from above)
};

// One forward. Token i is tokens[i] of sequence seq_ids[i] at positions[i]; logits are wanted
// for the rows listed in logit_rows (indices into the step).
struct StepRequest {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const kv::SeqId> seq_ids;
  std::span<const int32_t> logit_rows;
};

struct ExecutorStats {
  int64_t decode_steps = 0;
  int64_t prefill_steps = 0;
  int64_t failed_steps = 0;
  int64_t tokens = 0;   // tokens written to the cache
  int64_t rebinds = 0;  // the pool moved and the KV bindings were rebuilt
};

class Executor {
 public:
  Executor(backend::Backend& backend, const gguf::File& file, const ExecutorOptions& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs one forward and returns the logits, [logit_rows.size() x vocab_size] row-major,
  // valid until the next run. Errors from the cache (LimitExceeded, OutOfMemory, bad positions)
  // and from the backend leave every sequence as it was.
  std::span<const float> run(const StepRequest& step);

  kv::CellCache& cache() { return *cache_; }
  const kv::CellCache& cache() const { return *cache_; }
  const model::ModelConfig& model_config() const { return config_; }
  const model::Program& program(model::Method method, int32_t tokens) const;
  int32_t vocab_size() const { return vocab_size_; }
  int32_t max_write() const { return options_.max_write; }
  size_t weights_bytes() const { return weights_bytes_; }
  const ExecutorStats& stats() const { return stats_; }
  backend::Backend& backend() { return backend_; }
  // Test hook: called after prepare, before the forward; whatever it throws fails the step.
  void set_fault_hook(std::function<void()> hook) { fault_hook_ = std::move(hook); }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };
  const model::Program& choose_program(const StepRequest& step) const;
  void validate_request(const StepRequest& step) const;
  void place_weights(const gguf::File& file, const model::Program& program);
  void ensure_buffer(Buffer& buffer, size_t bytes, const char* what);
  void upload_step(const StepRequest& step, const kv::StepBuffers& kv_step);
  void bind_kv_if_moved(const model::Program& program);
  void forward(const model::Program& program, int64_t n_tokens, int64_t n_logit_rows);

  backend::Backend& backend_;
  ExecutorOptions options_;
  model::ModelConfig config_;
  int32_t vocab_size_ = 0;
  model::Program prefill_;
  std::vector<model::Program> decode_;  // one per bucket, ascending
  std::unique_ptr<kv::CellCache> cache_;
  std::vector<backend::TensorRef> weights_;  // by ValueId (same ids in every program)
  size_t weights_bytes_ = 0;

  Buffer arena_, tokens_, positions_, logit_rows_, cells_, read_len_, cell_pos_;
  std::vector<Buffer> page_rows_, pages_;  // one per distinct window
  std::vector<float> logits_;
  uint64_t bound_epoch_ = ~uint64_t{0};
  bool validated_ = false;
  ExecutorStats stats_;
  std::function<void()> fault_hook_;
};

}  // namespace cellm::runtime
