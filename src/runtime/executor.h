#pragma once
// The executor ("the delegate", DESIGN.md §5): owns a model's Programs (prefill, and decode
// per batch bucket), its weights as placed on a backend, the activation arena and the cell
// cache, and runs one forward at a time as
//     prepare (cache places cells, grows)  ->  bind  ->  forward  ->  commit
// with abort on any failure, so a failed forward never advances a sequence or leaks a cell.
// It is the only caller of prepare/commit/abort.
//
// Decode on a backend with static decode shapes (CUDA) is padded up to its bucket: padding
// rows read token 0 at position 0, write no cell and see no cell. Such decode buckets are
// captured as graphs after a short eager warm-up and replayed (graph_manager.h); every side
// buffer lives at a fixed address with a fixed capacity, so a graph serves any mix of
// sequences, and only a move of the KV pool (copy-growth) makes graphs stale.
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
#include "runtime/graph_manager.h"
#include "runtime/step_host_times.h"
#include "runtime/step_inputs.h"

namespace cellm::runtime {

struct ExecutorOptions {
  int32_t max_write = 512;         // most tokens in one forward (prefill programs)
  int32_t max_decode_batch = 256;  // largest decode bucket; buckets are 1, 2, 4, ... up to it
  int32_t max_context = 0;         // longest sequence (sizes the page lists); 0 = the model's
  bool graphs = true;              // capture decode buckets where the backend supports graphs
  int32_t graph_warmups = 2;       // eager runs of a bucket before it is captured
  kv::CellCacheConfig cache;       // page size, initial and max rows (max_write is taken from above)
};

// What a step returns: logits, or (cheaper on a device) only each row's argmax.
enum class StepOutput { Logits, Argmax };

// One forward. Token i is tokens[i] of sequence seq_ids[i] at positions[i]; output is wanted
// for the rows listed in logit_rows (indices into the step).
struct StepRequest {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const kv::SeqId> seq_ids;
  std::span<const int32_t> logit_rows;
  StepOutput output = StepOutput::Logits;
};

struct StepResult {
  std::span<const float> logits;    // [logit_rows x vocab] when output == Logits
  std::span<const int32_t> argmax;  // [logit_rows] when output == Argmax
};

struct ExecutorStats {
  int64_t decode_steps = 0;
  int64_t prefill_steps = 0;
  int64_t failed_steps = 0;
  int64_t tokens = 0;   // tokens written to the cache
  int64_t rebinds = 0;  // the pool moved and the KV bindings were rebuilt
  GraphStats graphs;
  StepHostTimes decode_host;
};

class Executor {
 public:
  Executor(backend::Backend& backend, const gguf::File& file, const ExecutorOptions& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs one forward. The result is valid until the next run. Errors from the cache
  // (LimitExceeded, OutOfMemory, bad positions) and from the backend leave every sequence as
  // it was.
  StepResult run(const StepRequest& step);

  kv::CellCache& cache() { return *cache_; }
  const kv::CellCache& cache() const { return *cache_; }
  const model::ModelConfig& model_config() const { return config_; }
  const model::Program& program(model::Method method, int32_t tokens) const;
  int32_t vocab_size() const { return vocab_size_; }
  int32_t max_write() const { return options_.max_write; }
  size_t weights_bytes() const { return weights_bytes_; }
  // The bytes of weights one decode step reads (Program::weights_read_whole, in the file's
  // types): the roofline's numerator, whatever the batch.
  size_t decode_weight_bytes() const { return decode_weight_bytes_; }
  const ExecutorStats& stats() const { return stats_; }
  bool graphs_enabled() const { return graphs_ != nullptr; }
  backend::Backend& backend() { return backend_; }
  // Test hook: called after prepare, before the forward; whatever it throws fails the step.
  void set_fault_hook(std::function<void()> hook) { fault_hook_ = std::move(hook); }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };
  // The step as the program runs it: the caller's rows, padded up to the bucket if needed.
  struct Shaped {
    std::vector<int32_t> tokens, positions, logit_rows, cells;
    std::vector<std::vector<int32_t>> page_rows;  // per window
    int64_t rows = 0;
    int64_t logit_count = 0;
  };
  const model::Program& choose_program(const StepRequest& step) const;
  void validate_request(const StepRequest& step) const;
  void place_weights(const gguf::File& file, const model::Program& program);
  void allocate(Buffer& buffer, size_t bytes, const char* what);
  void shape_step(const StepRequest& step, const kv::StepBuffers& kv_step, model::Method method, int64_t rows);
  void upload_step(const kv::StepBuffers& kv_step);
  void upload_cell_pos_rows(std::span<const int32_t> cell_pos);
  void bind_kv_if_moved(const model::Program& program);
  void forward(const model::Program& program, int64_t n_tokens, int64_t n_logit_rows);
  void forward_and_argmax(const model::Program& program, int64_t n_tokens, int64_t n_logit_rows);
  StepResult read_output(const model::Program& program, const StepRequest& step);

  backend::Backend& backend_;
  ExecutorOptions options_;
  model::ModelConfig config_;
  int32_t vocab_size_ = 0;
  model::Program prefill_;
  std::vector<model::Program> decode_;  // one per bucket, ascending
  std::unique_ptr<kv::CellCache> cache_;
  std::vector<backend::TensorRef> weights_;  // by the prefill program's ValueIds
  std::vector<std::vector<model::ValueId>> decode_weight_ids_;  // per decode program: its ValueId -> weights_'s
  size_t weights_bytes_ = 0;
  size_t decode_weight_bytes_ = 0;
  std::unique_ptr<GraphManager> graphs_;

  // The StepInputs regions: these five, then each window's page-list offsets, then each
  // window's page lists.
  enum Input : size_t { kTokens, kPositions, kLogitRows, kCells, kReadLen, kFirstWindowInput };
  size_t page_rows_region(size_t window) const { return kFirstWindowInput + window; }
  size_t pages_region(size_t window) const { return kFirstWindowInput + prefill_.geometry.windows().size() + window; }
  // Changed cell-table rows at most this far apart are sent in one copy (4 KiB).
  static constexpr int64_t kCellPosMergeGap = 1024;

  Buffer arena_, cell_pos_, argmax_;
  std::unique_ptr<StepInputs> inputs_;
  Shaped shaped_;
  Buffer logits_host_;  // host memory from the backend (page-locked on CUDA), grown on demand
  Buffer argmax_host_;  // the same, max_write entries
  std::vector<int32_t> argmax_rows_;  // the requested rows' argmax
  std::vector<int64_t> changed_rows_;  // the cell table's changed rows, sorted (upload_cell_pos_rows)
  uint64_t bound_epoch_ = ~uint64_t{0};
  bool validated_ = false;
  ExecutorStats stats_;
  std::function<void()> fault_hook_;
};

}  // namespace cellm::runtime
