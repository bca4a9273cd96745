#include "runtime/executor.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "kv/page_pool.h"
#include "kv/pool_bindings.h"
#include "model/decoder_program.h"

namespace cellm::runtime {

using model::Method;
using model::Program;
using model::ValueId;
using model::ValueKind;

Executor::Executor(backend::Backend& backend, const gguf::File& file, const ExecutorOptions& options)
    : backend_(backend), options_(options), config_(model::read_model_config(file)) {
  if (options_.max_write < 1) fail(ErrorCode::InvalidArgument, "max_write must be at least 1");
  options_.max_decode_batch = std::clamp(options_.max_decode_batch, 1, options_.max_write);
  prefill_ = model::build_decoder_program(file, config_, Method::Prefill, options_.max_write);
  for (int32_t bucket = 1;; bucket *= 2) {
    const int32_t size = std::min(bucket, options_.max_decode_batch);
    decode_.push_back(model::build_decoder_program(file, config_, Method::Decode, size));
    if (size == options_.max_decode_batch) break;
  }
  vocab_size_ = prefill_.vocab_size;
  place_weights(file, prefill_);

  size_t arena = prefill_.arena_bytes;
  for (const Program& p : decode_) arena = std::max(arena, p.arena_bytes);
  ensure_buffer(arena_, arena, "activations");
  const size_t per_token = sizeof(int32_t) * static_cast<size_t>(options_.max_write);
  ensure_buffer(tokens_, per_token, "step tokens");
  ensure_buffer(positions_, per_token, "step positions");
  ensure_buffer(logit_rows_, per_token, "step logit rows");
  ensure_buffer(cells_, per_token, "step cells");
  ensure_buffer(read_len_, sizeof(int32_t), "step read length");
  page_rows_.resize(prefill_.geometry.window_count());
  pages_.resize(prefill_.geometry.window_count());
  for (auto& b : page_rows_) ensure_buffer(b, per_token + sizeof(int32_t), "page list offsets");

  kv::CellCacheConfig cache_config = options_.cache;
  cache_config.max_write = options_.max_write;
  cache_ = std::make_unique<kv::CellCache>(prefill_.geometry, cache_config,
                                           backend_.create_kv_storage(prefill_.geometry.bytes_per_cell()));
}

Executor::~Executor() {
  for (Buffer* b : {&arena_, &tokens_, &positions_, &logit_rows_, &cells_, &read_len_, &cell_pos_}) backend_.release(b->data);
  for (auto* list : {&page_rows_, &pages_})
    for (Buffer& b : *list) backend_.release(b.data);
}

void Executor::place_weights(const gguf::File& file, const Program& program) {
  weights_.assign(program.values.size(), {});
  for (ValueId id = 0; id < static_cast<ValueId>(program.values.size()); ++id) {
    const model::ValueInfo& v = program.values[id];
    if (v.kind != ValueKind::Weight) continue;
    const gguf::TensorInfo& t = file.tensor(v.name);
    const backend::TensorRef host{const_cast<uint8_t*>(t.data), t.type, v.rows, v.cols, row_bytes(t.type, v.cols)};
    weights_[id] = backend_.place_weight(host, t.name);
    weights_bytes_ += t.bytes;
  }
  // Every program must name the same weights at the same ids (the builder is deterministic).
  for (const Program& p : decode_)
    for (ValueId id = 0; id < static_cast<ValueId>(p.values.size()); ++id)
      if (p.values[id].kind == ValueKind::Weight &&
          (id >= static_cast<ValueId>(program.values.size()) || program.values[id].name != p.values[id].name))
        fail(ErrorCode::Internal, "decode program weight #", id, " differs from the prefill program's");
}

void Executor::ensure_buffer(Buffer& buffer, size_t bytes, const char* what) {
  if (buffer.bytes >= bytes && buffer.data != nullptr) return;
  void* fresh = backend_.allocate(std::max<size_t>(bytes, 64), what);
  backend_.release(buffer.data);
  buffer.data = fresh;
  buffer.bytes = std::max<size_t>(bytes, 64);
}

const Program& Executor::program(Method method, int32_t tokens) const {
  if (method == Method::Prefill) return prefill_;
  for (const Program& p : decode_)
    if (p.max_tokens >= tokens) return p;
  return decode_.back();
}

const Program& Executor::choose_program(const StepRequest& step) const {
  // All-decode steps (one token per sequence, within the largest bucket) run the decode
  // program of their bucket; anything else runs prefill.
  const auto n = static_cast<int32_t>(step.tokens.size());
  if (n <= options_.max_decode_batch) {
    bool one_per_sequence = true;
    for (int32_t i = 0; i < n && one_per_sequence; ++i)
      for (int32_t j = 0; j < i; ++j)
        if (step.seq_ids[j] == step.seq_ids[i]) {
          one_per_sequence = false;
          break;
        }
    if (one_per_sequence) return program(Method::Decode, n);
  }
  return prefill_;
}

void Executor::validate_request(const StepRequest& step) const {
  const size_t n = step.tokens.size();
  if (n == 0) fail(ErrorCode::InvalidArgument, "a step needs at least one token");
  if (n > static_cast<size_t>(options_.max_write))
    fail(ErrorCode::LimitExceeded, "a step of ", n, " tokens exceeds max_write ", options_.max_write);
  if (step.positions.size() != n || step.seq_ids.size() != n)
    fail(ErrorCode::InvalidArgument, "step has ", n, " tokens but ", step.positions.size(), " positions and ",
         step.seq_ids.size(), " sequence ids");
  if (step.logit_rows.size() > n) fail(ErrorCode::InvalidArgument, "more logit rows than tokens");
  for (int32_t r : step.logit_rows)
    if (r < 0 || static_cast<size_t>(r) >= n)
      fail(ErrorCode::InvalidArgument, "logit row ", r, " is outside the step's ", n, " tokens");
  for (int32_t t : step.tokens)
    if (t < 0 || t >= vocab_size_)
      fail(ErrorCode::InvalidArgument, "token id ", t, " is outside the vocabulary (", vocab_size_, ")");
}

void Executor::upload_step(const StepRequest& step, const kv::StepBuffers& kv_step) {
  const size_t n = step.tokens.size();
  backend_.upload(tokens_.data, step.tokens.data(), n * sizeof(int32_t));
  backend_.upload(positions_.data, step.positions.data(), n * sizeof(int32_t));
  backend_.upload(logit_rows_.data, step.logit_rows.data(), step.logit_rows.size() * sizeof(int32_t));
  backend_.upload(cells_.data, kv_step.cells.data(), n * sizeof(int32_t));
  backend_.upload(read_len_.data, &kv_step.read_len, sizeof(int32_t));
  for (size_t w = 0; w < kv_step.windows.size(); ++w) {
    const kv::WindowPages& wp = kv_step.windows[w];
    backend_.upload(page_rows_[w].data, wp.page_rows.data(), wp.page_rows.size() * sizeof(int32_t));
    ensure_buffer(pages_[w], std::max<size_t>(wp.pages.size(), 1) * sizeof(int32_t) * 2, "page lists");
    backend_.upload(pages_[w].data, wp.pages.data(), wp.pages.size() * sizeof(int32_t));
  }
  // The cell table: all of it after a growth or when the cache says so, else the changed rows.
  const auto cell_pos = cache_->cell_pos();
  const size_t table_bytes = cell_pos.size() * sizeof(int32_t);
  if (cell_pos_.bytes < table_bytes || cache_->all_cell_pos_changed()) {
    ensure_buffer(cell_pos_, table_bytes * 2, "cell table");
    backend_.upload(cell_pos_.data, cell_pos.data(), table_bytes);
  } else {
    for (int64_t row : cache_->changed_cell_pos_rows())
      backend_.upload(static_cast<int32_t*>(cell_pos_.data) + row, &cell_pos[row], sizeof(int32_t));
  }
  cache_->mark_cell_pos_synced();
}

void Executor::bind_kv_if_moved(const Program& program) {
  const kv::KvStorage& storage = cache_->storage();
  if (storage.binding_epoch() == bound_epoch_ && validated_) return;
  // The pool is bound by address; validate the whole manifest against what we bind now.
  std::vector<kv::BoundTensor> bound = kv::pool_bindings(program.geometry, storage);
  const int64_t t = program.max_tokens;
  bound.push_back({kv::binding_name::kCells, DType::I32, {t}, 0, cells_.data});
  bound.push_back({kv::binding_name::kCellPos, DType::I32, {storage.rows()}, 0, cell_pos_.data});
  bound.push_back({kv::binding_name::kReadLen, DType::I32, {1}, 0, read_len_.data});
  const auto& windows = program.geometry.windows();
  for (size_t w = 0; w < windows.size(); ++w) {
    bound.push_back({kv::binding_name::page_rows(windows[w]), DType::I32, {t + 1}, 0, page_rows_[w].data});
    bound.push_back({kv::binding_name::pages(windows[w]), DType::I32, {static_cast<int64_t>(pages_[w].bytes / 4)}, 0,
                     pages_[w].data});
  }
  // Only what the program declares is checked (read_len is declared for dense rendering).
  std::vector<kv::BoundTensor> declared;
  for (auto& b : bound)
    if (program.manifest.find(b.name) != nullptr) declared.push_back(std::move(b));
  program.manifest.validate(declared);
  if (validated_ && storage.binding_epoch() != bound_epoch_) ++stats_.rebinds;
  bound_epoch_ = storage.binding_epoch();
  validated_ = true;
}

std::span<const float> Executor::run(const StepRequest& step) {
  validate_request(step);
  const Program& program = choose_program(step);
  const kv::StepBuffers& kv_step = cache_->prepare(step.seq_ids, step.positions);
  try {
    upload_step(step, kv_step);
    bind_kv_if_moved(program);
    if (fault_hook_) fault_hook_();
    forward(program, static_cast<int64_t>(step.tokens.size()), static_cast<int64_t>(step.logit_rows.size()));
    logits_.resize(step.logit_rows.size() * static_cast<size_t>(vocab_size_));
    const model::ValueInfo& out = program.value(program.logits);
    backend_.download(logits_.data(), static_cast<char*>(arena_.data) + out.arena_offset, logits_.size() * sizeof(float));
  } catch (...) {
    cache_->abort();
    ++stats_.failed_steps;
    throw;
  }
  cache_->commit();
  ++(program.method == Method::Decode ? stats_.decode_steps : stats_.prefill_steps);
  stats_.tokens += static_cast<int64_t>(step.tokens.size());
  return logits_;
}

void Executor::forward(const Program& program, int64_t n_tokens, int64_t n_logit_rows) {
  const kv::Geometry& geometry = program.geometry;
  const kv::KvStorage& storage = cache_->storage();
  char* pool = static_cast<char*>(storage.base());
  auto ref = [&](ValueId id) -> backend::TensorRef {
    const model::ValueInfo& v = program.value(id);
    switch (v.kind) {
      case ValueKind::Weight: return weights_[id];
      case ValueKind::Input: {
        void* data = id == program.tokens ? tokens_.data : id == program.positions ? positions_.data : logit_rows_.data;
        const int64_t rows = v.extent == model::Extent::LogitRows ? n_logit_rows : n_tokens;
        return {data, DType::I32, rows, 1, sizeof(int32_t)};
      }
      default: {
        const int64_t rows = v.extent == model::Extent::LogitRows ? n_logit_rows : n_tokens;
        return {static_cast<char*>(arena_.data) + v.arena_offset, DType::F32, rows, v.cols,
                static_cast<size_t>(v.cols) * sizeof(float)};
      }
    }
  };
  auto ints = [&](ValueId id) { return static_cast<const int32_t*>(ref(id).data); };
  auto floats = [&](ValueId id) { return static_cast<const float*>(weights_[id].data); };
  for (const model::Op& op : program.ops) {
    using model::OpCode;
    switch (op.code) {
      case OpCode::Embed: backend_.embed(ref(op.b), ints(op.a), op.scale, ref(op.out)); break;
      case OpCode::RmsNorm: backend_.rms_norm(ref(op.a), floats(op.b), op.group, op.eps, ref(op.out)); break;
      case OpCode::MatMul:
        backend_.matmul(ref(op.a), ref(op.b), op.c == model::kNoValue ? nullptr : floats(op.c), ref(op.out));
        break;
      case OpCode::Rope: backend_.rope(ref(op.a), ints(op.b), op.rope); break;
      case OpCode::KvStore: {
        const kv::LayerGeometry& g = geometry.layer(op.layer);
        backend::KvDestination dst{pool + geometry.k_offset(op.layer), pool + geometry.v_offset(op.layer),
                                   geometry.bytes_per_cell(), g.dtype, static_cast<const int32_t*>(cells_.data)};
        backend_.kv_store(ref(op.a), ref(op.b), dst);
        break;
      }
      case OpCode::Attention: {
        const kv::LayerGeometry& g = geometry.layer(op.layer);
        const int32_t wi = geometry.window_index(op.layer);
        backend::PagedKv kv{pool + geometry.k_offset(op.layer),
                            pool + geometry.v_offset(op.layer),
                            geometry.bytes_per_cell(),
                            g.dtype,
                            g.n_kv_heads,
                            g.head_dim,
                            g.window,
                            cache_->config().page_cells,
                            static_cast<const int32_t*>(cell_pos_.data),
                            static_cast<const int32_t*>(page_rows_[wi].data),
                            static_cast<const int32_t*>(pages_[wi].data)};
        backend_.attention(ref(op.a), kv, ints(program.positions), op.scale, ref(op.out));
        break;
      }
      case OpCode::Add: backend_.add(ref(op.a), ref(op.b), ref(op.out)); break;
      case OpCode::Glu: backend_.glu(ref(op.a), ref(op.b), op.act, ref(op.out)); break;
      case OpCode::GatherRows: backend_.gather_rows(ref(op.a), ints(op.b), ref(op.out)); break;
    }
  }
}

}  // namespace cellm::runtime
