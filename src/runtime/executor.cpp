#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <unordered_map>

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
using Clock = std::chrono::steady_clock;

namespace {

// Most page-list entries one row can need for a layer of this window.
int64_t max_pages_per_row(int32_t window, int32_t max_context, int32_t page_cells) {
  const int32_t span = window > 0 ? std::min(window + page_cells, max_context) : max_context;
  return (span + page_cells - 1) / page_cells + 1;
}

}  // namespace

Executor::Executor(backend::Backend& backend, const gguf::File& file, const ExecutorOptions& options)
    : backend_(backend), options_(options), config_(model::read_model_config(file)) {
  if (options_.max_write < 1) fail(ErrorCode::InvalidArgument, "max_write must be at least 1");
  options_.max_decode_batch = std::clamp(options_.max_decode_batch, 1, options_.max_write);
  if (options_.max_context <= 0) options_.max_context = config_.context_length;
  if (config_.context_length > 0 && options_.max_context > config_.context_length)
    log_warn("context length ", options_.max_context, " exceeds the ", config_.context_length,
             " positions the model was trained on: output past them is unreliable");
  prefill_ = model::build_decoder_program(file, config_, Method::Prefill, options_.max_write);
  for (int32_t bucket = 1;; bucket *= 2) {
    const int32_t size = std::min(bucket, options_.max_decode_batch);
    decode_.push_back(model::build_decoder_program(file, config_, Method::Decode, size));
    if (size == options_.max_decode_batch) break;
  }
  vocab_size_ = prefill_.vocab_size;
  place_weights(file, prefill_);

  kv::CellCacheConfig cache_config = options_.cache;
  cache_config.max_write = options_.max_write;
  cache_ = std::make_unique<kv::CellCache>(prefill_.geometry, cache_config,
                                           backend_.create_kv_storage(prefill_.geometry.bytes_per_cell()));

  // Every buffer a forward reads is allocated once, at its largest, so its address never
  // changes: a captured graph stays valid whatever the step.
  size_t arena = prefill_.arena_bytes;
  for (const Program& p : decode_) arena = std::max(arena, p.arena_bytes);
  allocate(arena_, arena, "activations");
  const size_t per_token = sizeof(int32_t) * static_cast<size_t>(options_.max_write);
  allocate(argmax_, per_token, "step argmax");
  argmax_host_.data = backend_.allocate_host(per_token, "step argmax (host side)");
  argmax_host_.bytes = per_token;
  allocate(cell_pos_, sizeof(int32_t) * static_cast<size_t>(cache_->config().max_rows), "cell table");
  // The step's inputs, in StepInputs regions (the Input enum's order), page lists last: they are
  // the large ones, mostly unused.
  const auto& windows = prefill_.geometry.windows();
  std::vector<size_t> regions{per_token, per_token, per_token, per_token, sizeof(int32_t)};
  for (size_t w = 0; w < windows.size(); ++w) regions.push_back(per_token + sizeof(int32_t));
  for (size_t w = 0; w < windows.size(); ++w) {
    const int64_t entries = options_.max_write * max_pages_per_row(windows[w], options_.max_context,
                                                                   cache_->config().page_cells);
    regions.push_back(sizeof(int32_t) * static_cast<size_t>(entries));
  }
  inputs_ = std::make_unique<StepInputs>(backend_, regions);
  if (options_.graphs && backend_.supports_graphs())
    graphs_ = std::make_unique<GraphManager>(backend_, static_cast<int32_t>(decode_.size()), options_.graph_warmups);
}

Executor::~Executor() {
  graphs_.reset();
  inputs_.reset();
  for (Buffer* b : {&arena_, &argmax_, &cell_pos_}) backend_.release(b->data);
  backend_.release_host(argmax_host_.data);
  backend_.release_host(logits_host_.data);
}

void Executor::place_weights(const gguf::File& file, const Program& program) {
  weights_.assign(program.values.size(), {});
  std::vector<size_t> file_bytes(program.values.size(), 0);  // by ValueId
  for (ValueId id = 0; id < static_cast<ValueId>(program.values.size()); ++id) {
    const model::ValueInfo& v = program.values[id];
    if (v.kind != ValueKind::Weight) continue;
    if (v.parts.empty()) {
      const gguf::TensorInfo& t = file.tensor(v.name);
      const backend::TensorRef host{const_cast<uint8_t*>(t.data), t.type, v.rows, v.cols, row_bytes(t.type, v.cols)};
      weights_[id] = backend_.place_weight(host, t.name);
      file_bytes[id] = t.bytes;
      weights_bytes_ += t.bytes;
      continue;
    }
    // Stacked projections: the backend decides whether to join the parts or use them in place.
    std::vector<backend::TensorRef> parts;
    for (const std::string& part : v.parts) {
      const gguf::TensorInfo& t = file.tensor(part);
      parts.push_back({const_cast<uint8_t*>(t.data), t.type, t.rows(), v.cols, row_bytes(t.type, v.cols)});
      file_bytes[id] += t.bytes;
      weights_bytes_ += t.bytes;
    }
    weights_[id] = backend_.place_stacked_weight(parts, v.name);
  }
  // The decode programs name the same weights, at ids of their own (a decode program has values
  // the prefill program has not, and the other way round): each finds its weights by name once.
  std::unordered_map<std::string_view, ValueId> by_name;
  for (ValueId id = 0; id < static_cast<ValueId>(program.values.size()); ++id)
    if (program.values[id].kind == ValueKind::Weight) by_name.emplace(program.values[id].name, id);
  decode_weight_ids_.clear();
  for (const Program& p : decode_) {
    std::vector<ValueId>& ids = decode_weight_ids_.emplace_back(p.values.size(), model::kNoValue);
    for (ValueId id = 0; id < static_cast<ValueId>(p.values.size()); ++id) {
      if (p.values[id].kind != ValueKind::Weight) continue;
      const auto found = by_name.find(p.values[id].name);
      if (found == by_name.end() || program.values[found->second].rows != p.values[id].rows ||
          program.values[found->second].cols != p.values[id].cols)
        fail(ErrorCode::Internal, "decode program weight ", p.values[id].name, " differs from the prefill program's");
      ids[id] = found->second;
    }
  }
  for (const ValueId id : decode_.front().weights_read_whole()) decode_weight_bytes_ += file_bytes[decode_weight_ids_[0][id]];
}

void Executor::allocate(Buffer& buffer, size_t bytes, const char* what) {
  buffer.bytes = std::max<size_t>(bytes, 64);
  buffer.data = backend_.allocate(buffer.bytes, what);
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
  if (n > options_.max_decode_batch) return prefill_;
  for (int32_t i = 0; i < n; ++i)
    for (int32_t j = 0; j < i; ++j)
      if (step.seq_ids[j] == step.seq_ids[i]) return prefill_;
  return program(Method::Decode, n);
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
  for (int32_t p : step.positions)
    if (p >= options_.max_context)
      fail(ErrorCode::LimitExceeded, "position ", p, " is beyond the context length ", options_.max_context);
}

void Executor::shape_step(const StepRequest& step, const kv::StepBuffers& kv_step, Method method, int64_t rows) {
  // Padding rows (rows beyond the request) read token 0 at position 0, write no cell (-1) and
  // list no page, so they change nothing and see nothing.
  Shaped& s = shaped_;
  s.rows = rows;
  s.tokens.assign(step.tokens.begin(), step.tokens.end());
  s.positions.assign(step.positions.begin(), step.positions.end());
  s.cells.assign(kv_step.cells.begin(), kv_step.cells.end());
  s.tokens.resize(static_cast<size_t>(rows), 0);
  s.positions.resize(static_cast<size_t>(rows), 0);
  s.cells.resize(static_cast<size_t>(rows), -1);
  if (method == Method::Decode) {
    // A decode program computes every row's output, padding rows included (it has no gather:
    // decoder_program.cpp); read_output picks the requested ones.
    s.logit_rows.resize(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) s.logit_rows[r] = static_cast<int32_t>(r);
  } else {
    s.logit_rows.assign(step.logit_rows.begin(), step.logit_rows.end());
  }
  s.logit_count = static_cast<int64_t>(s.logit_rows.size());
  s.page_rows.resize(kv_step.windows.size());
  for (size_t w = 0; w < kv_step.windows.size(); ++w) {
    const kv::WindowPages& wp = kv_step.windows[w];
    s.page_rows[w].assign(wp.page_rows.begin(), wp.page_rows.end());
    s.page_rows[w].resize(static_cast<size_t>(rows) + 1, wp.page_rows.back());
    const size_t capacity = inputs_->capacity(pages_region(w));
    if (wp.pages.size() * sizeof(int32_t) > capacity)
      fail(ErrorCode::Internal, "page lists of ", wp.pages.size(), " entries exceed their buffer (",
           capacity / sizeof(int32_t), ")");
  }
}

void Executor::upload_step(const kv::StepBuffers& kv_step) {
  const Shaped& s = shaped_;
  inputs_->put(kTokens, s.tokens);
  inputs_->put(kPositions, s.positions);
  inputs_->put(kLogitRows, s.logit_rows);
  inputs_->put(kCells, s.cells);
  inputs_->put(kReadLen, std::span(&kv_step.read_len, 1));
  for (size_t w = 0; w < kv_step.windows.size(); ++w) {
    inputs_->put(page_rows_region(w), s.page_rows[w]);
    inputs_->put(pages_region(w), kv_step.windows[w].pages);
  }
  inputs_->upload();
  // The cell table: all of it after a growth or when the cache says so, else the changed rows.
  const auto cell_pos = cache_->cell_pos();
  if (cache_->all_cell_pos_changed()) {
    backend_.upload(cell_pos_.data, cell_pos.data(), cell_pos.size() * sizeof(int32_t));
  } else {
    upload_cell_pos_rows(cell_pos);
  }
  cache_->mark_cell_pos_synced();
}

void Executor::upload_cell_pos_rows(std::span<const int32_t> cell_pos) {
  // A copy per stretch of changed rows, the unchanged rows between them included (the host's
  // table is the whole truth, so rewriting them changes nothing): a decode step's new cells are
  // mostly neighbours, and a batch of 64 rows took 64 copies.
  changed_rows_.assign(cache_->changed_cell_pos_rows().begin(), cache_->changed_cell_pos_rows().end());
  std::sort(changed_rows_.begin(), changed_rows_.end());
  auto* device = static_cast<int32_t*>(cell_pos_.data);
  for (size_t i = 0; i < changed_rows_.size();) {
    const int64_t first = changed_rows_[i];
    int64_t last = first;
    for (++i; i < changed_rows_.size() && changed_rows_[i] - last <= kCellPosMergeGap; ++i) last = changed_rows_[i];
    backend_.upload(device + first, &cell_pos[static_cast<size_t>(first)],
                    static_cast<size_t>(last - first + 1) * sizeof(int32_t));
  }
}

void Executor::bind_kv_if_moved(const Program& program) {
  const kv::KvStorage& storage = cache_->storage();
  if (storage.binding_epoch() == bound_epoch_ && validated_) return;
  // The pool is bound by address; validate the whole manifest against what we bind now.
  std::vector<kv::BoundTensor> bound = kv::pool_bindings(program.geometry, storage);
  const int64_t t = program.max_tokens;
  bound.push_back({kv::binding_name::kCells, DType::I32, {t}, 0, inputs_->device(kCells)});
  bound.push_back({kv::binding_name::kCellPos, DType::I32, {storage.rows()}, 0, cell_pos_.data});
  bound.push_back({kv::binding_name::kReadLen, DType::I32, {1}, 0, inputs_->device(kReadLen)});
  const auto& windows = program.geometry.windows();
  for (size_t w = 0; w < windows.size(); ++w) {
    bound.push_back({kv::binding_name::page_rows(windows[w]), DType::I32, {t + 1}, 0,
                     inputs_->device(page_rows_region(w))});
    bound.push_back({kv::binding_name::pages(windows[w]), DType::I32,
                     {static_cast<int64_t>(inputs_->capacity(pages_region(w)) / 4)}, 0,
                     inputs_->device(pages_region(w))});
  }
  program.manifest.validate(bound);
  if (validated_ && storage.binding_epoch() != bound_epoch_) ++stats_.rebinds;
  bound_epoch_ = storage.binding_epoch();
  validated_ = true;
}

StepResult Executor::run(const StepRequest& step) {
  const auto started = Clock::now();
  validate_request(step);
  const Program& program = choose_program(step);
  const bool padded = program.method == Method::Decode && backend_.static_decode_shapes();
  const int64_t rows = padded ? program.max_tokens : static_cast<int64_t>(step.tokens.size());
  const kv::StepBuffers& kv_step = cache_->prepare(step.seq_ids, step.positions);
  StepResult result;
  Clock::time_point bound, launched, read;
  try {
    shape_step(step, kv_step, program.method, rows);
    upload_step(kv_step);
    bind_kv_if_moved(program);
    if (fault_hook_) fault_hook_();
    bound = Clock::now();
    const bool argmax = padded || step.output == StepOutput::Argmax;
    if (graphs_ && program.method == Method::Decode) {
      const auto bucket = static_cast<int32_t>(&program - decode_.data());
      graphs_->run(bucket, cache_->storage().binding_epoch(),
                   [&] { forward_and_argmax(program, rows, shaped_.logit_count); });
    } else if (argmax) {
      forward_and_argmax(program, rows, shaped_.logit_count);
    } else {
      forward(program, rows, shaped_.logit_count);
    }
    launched = Clock::now();
    result = read_output(program, step);
    inputs_->settled();  // read_output waited for the step
    read = Clock::now();
  } catch (...) {
    cache_->abort();
    ++stats_.failed_steps;
    throw;
  }
  cache_->commit();
  ++(program.method == Method::Decode ? stats_.decode_steps : stats_.prefill_steps);
  stats_.tokens += static_cast<int64_t>(step.tokens.size());
  if (graphs_) stats_.graphs = graphs_->stats();
  if (program.method == Method::Decode) {
    auto seconds = [](Clock::time_point from, Clock::time_point to) {
      return std::chrono::duration<double>(to - from).count();
    };
    StepHostTimes& t = stats_.decode_host;
    ++t.steps;
    t.inputs_s += seconds(started, bound);
    t.launch_s += seconds(bound, launched);
    t.wait_s += seconds(launched, read);
    t.total_s += seconds(started, Clock::now());
  }
  return result;
}

StepResult Executor::read_output(const Program& program, const StepRequest& step) {
  // Output row k of the program belongs to step row shaped_.logit_rows[k]; a padded step
  // computed every row, so the requested ones are picked by their step row.
  const size_t k = step.logit_rows.size();
  const bool padded = shaped_.logit_count != static_cast<int64_t>(k) ||
                      !std::equal(step.logit_rows.begin(), step.logit_rows.end(), shaped_.logit_rows.begin());
  auto source_row = [&](size_t i) { return padded ? static_cast<size_t>(step.logit_rows[i]) : i; };
  StepResult r;
  if (step.output == StepOutput::Argmax) {
    const auto* all = static_cast<const int32_t*>(argmax_host_.data);
    backend_.download(argmax_host_.data, argmax_.data, static_cast<size_t>(shaped_.logit_count) * sizeof(int32_t));
    argmax_rows_.resize(k);
    for (size_t i = 0; i < k; ++i) argmax_rows_[i] = all[source_row(i)];
    r.argmax = argmax_rows_;
    return r;
  }
  const size_t vocab = static_cast<size_t>(vocab_size_);
  const char* out = static_cast<const char*>(arena_.data) + program.value(program.logits).arena_offset;
  const size_t bytes = k * vocab * sizeof(float);
  if (logits_host_.bytes < bytes) {  // doubling: generations join a batch one by one
    const size_t grown = std::max(bytes, 2 * logits_host_.bytes);
    backend_.release_host(logits_host_.data);
    logits_host_ = {};
    logits_host_.data = backend_.allocate_host(grown, "step logits");
    logits_host_.bytes = grown;
  }
  auto* logits = static_cast<float*>(logits_host_.data);
  if (!padded) {
    backend_.download(logits, out, bytes);
  } else {
    for (size_t i = 0; i < k; ++i)
      backend_.download(logits + i * vocab, out + source_row(i) * vocab * sizeof(float), vocab * sizeof(float));
  }
  r.logits = std::span<const float>(logits, k * vocab);
  return r;
}

void Executor::forward_and_argmax(const Program& program, int64_t n_tokens, int64_t n_logit_rows) {
  forward(program, n_tokens, n_logit_rows);
  const model::ValueInfo& out = program.value(program.logits);
  backend_.argmax_rows({static_cast<char*>(arena_.data) + out.arena_offset, DType::F32, n_logit_rows, out.cols,
                        static_cast<size_t>(out.cols) * sizeof(float)},
                       static_cast<int32_t*>(argmax_.data));
}

void Executor::forward(const Program& program, int64_t n_tokens, int64_t n_logit_rows) {
  backend_.begin_forward(n_tokens);
  const kv::Geometry& geometry = program.geometry;
  const kv::KvStorage& storage = cache_->storage();
  char* pool = static_cast<char*>(storage.base());
  // weights_ is by the prefill program's ids; a decode program's map to them.
  const std::vector<ValueId>* weight_ids =
      program.method == Method::Decode ? &decode_weight_ids_[static_cast<size_t>(&program - decode_.data())] : nullptr;
  auto weight = [&](ValueId id) -> const backend::TensorRef& {
    return weights_[weight_ids != nullptr ? (*weight_ids)[id] : id];
  };
  auto ref = [&](ValueId id) -> backend::TensorRef {
    const model::ValueInfo& v = program.value(id);
    switch (v.kind) {
      case ValueKind::Weight: return weight(id);
      case ValueKind::Input: {
        void* data = inputs_->device(id == program.tokens ? kTokens : id == program.positions ? kPositions : kLogitRows);
        const int64_t rows = v.extent == model::Extent::LogitRows ? n_logit_rows : n_tokens;
        return {data, DType::I32, rows, 1, sizeof(int32_t)};
      }
      default: {
        const int64_t rows = v.extent == model::Extent::LogitRows ? n_logit_rows : n_tokens;
        if (v.view_of != model::kNoValue) {  // columns of its owner's rows
          const model::ValueInfo& owner = program.value(v.view_of);
          return {static_cast<char*>(arena_.data) + owner.arena_offset + static_cast<size_t>(v.view_col) * sizeof(float),
                  DType::F32, rows, v.cols, static_cast<size_t>(owner.cols) * sizeof(float)};
        }
        return {static_cast<char*>(arena_.data) + v.arena_offset, DType::F32, rows, v.cols,
                static_cast<size_t>(v.cols) * sizeof(float)};
      }
    }
  };
  auto ints = [&](ValueId id) { return static_cast<const int32_t*>(ref(id).data); };
  auto floats = [&](ValueId id) { return static_cast<const float*>(weight(id).data); };
  using model::OpCode;
  auto bias_of = [&](const model::Op& matmul) { return matmul.c == model::kNoValue ? nullptr : floats(matmul.c); };
  // The op after ops[i] when it multiplies ops[i]'s output (a MatMul, or also a MatMulAdd): such
  // pairs go to the backend as one call, which it may fuse (the CUDA backend quantizes the
  // product's activations in the producer's kernel).
  auto product_after = [&](size_t i, bool or_matmul_add) -> const model::Op* {
    if (i + 1 >= program.ops.size()) return nullptr;
    const model::Op& next = program.ops[i + 1];
    const bool product = next.code == OpCode::MatMul || (or_matmul_add && next.code == OpCode::MatMulAdd);
    return product && next.a == program.ops[i].out ? &next : nullptr;
  };
  // What a MatMul or MatMulAdd after a producer adds to its product, for the backend's fused
  // calls: the MatMul's bias, or the MatMulAdd's residual (which takes no bias).
  struct ProductTail {
    const float* bias = nullptr;
    backend::TensorRef residual;
    bool adds = false;
    const backend::TensorRef* residual_or_null() const { return adds ? &residual : nullptr; }
  };
  auto tail_of = [&](const model::Op& product) {
    ProductTail tail;
    tail.adds = product.code == OpCode::MatMulAdd;
    if (tail.adds)
      tail.residual = ref(product.c);
    else
      tail.bias = bias_of(product);
    return tail;
  };
  // Where a KvStore op writes: its layer's K and V bytes of the pool rows the step's cells name.
  auto kv_destination = [&](const model::Op& store) {
    const kv::LayerGeometry& g = geometry.layer(store.layer);
    return backend::KvDestination{pool + geometry.k_offset(store.layer), pool + geometry.v_offset(store.layer),
                                  geometry.bytes_per_cell(), g.dtype, static_cast<const int32_t*>(inputs_->device(kCells))};
  };
  // A layer's view of the pool and the step's page lists, for its Attention op.
  auto paged_kv = [&](const model::Op& attention) {
    const kv::LayerGeometry& g = geometry.layer(attention.layer);
    const int32_t wi = geometry.window_index(attention.layer);
    return backend::PagedKv{pool + geometry.k_offset(attention.layer),
                            pool + geometry.v_offset(attention.layer),
                            geometry.bytes_per_cell(),
                            g.dtype,
                            g.n_kv_heads,
                            g.head_dim,
                            g.window,
                            cache_->config().page_cells,
                            static_cast<const int32_t*>(cell_pos_.data),
                            static_cast<const int32_t*>(inputs_->device(page_rows_region(wi))),
                            static_cast<const int32_t*>(inputs_->device(pages_region(wi))),
                            attention.scale_queries};
  };
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const model::Op& op = program.ops[i];
    switch (op.code) {
      case OpCode::Embed: backend_.embed(ref(op.b), ints(op.a), op.scale, ref(op.out)); break;
      case OpCode::RmsNorm: {
        const backend::TensorRef x = ref(op.a);
        if (const model::Op* next = product_after(i, false); next != nullptr && op.group == x.cols) {
          backend_.rms_norm_matmul(x, floats(op.b), op.eps, ref(op.out), ref(next->b), bias_of(*next), ref(next->out));
          ++i;
          break;
        }
        backend_.rms_norm(x, floats(op.b), op.group, op.eps, ref(op.out));
        break;
      }
      case OpCode::MatMul:
        backend_.matmul(ref(op.a), ref(op.b), bias_of(op), ref(op.out));
        break;
      case OpCode::MatMulAdd: backend_.matmul_add(ref(op.a), ref(op.b), ref(op.c), ref(op.out)); break;
      case OpCode::Rope: {
        // In a decode step, the rotation, the layer's K/V store and its attention (and the output
        // projection after it): one backend call, where the CUDA backend's attention kernel
        // rotates and stores itself (attention.cu).
        if (program.method == model::Method::Decode && op.b == program.positions && i + 2 < program.ops.size() &&
            program.ops[i + 1].code == OpCode::KvStore && program.ops[i + 2].code == OpCode::Attention) {
          const model::Op& store = program.ops[i + 1];
          const model::Op& attention = program.ops[i + 2];
          const model::Op* next = product_after(i + 2, true);
          const ProductTail tail = next != nullptr ? tail_of(*next) : ProductTail{};
          const backend::TensorRef w = next != nullptr ? ref(next->b) : backend::TensorRef{};
          backend_.rope_kv_store_attention(ref(op.a), ints(op.b), op.rope, ref(store.a), ref(store.b),
                                           kv_destination(store), ref(attention.a), paged_kv(attention),
                                           attention.scale, ref(attention.out), next != nullptr ? &w : nullptr,
                                           tail.bias, tail.residual_or_null(),
                                           next != nullptr ? ref(next->out) : ref(attention.out));
          i += next != nullptr ? 3 : 2;
          break;
        }
        // Otherwise the rotation then the layer's K/V store (K among the rotated rows): one
        // backend call, which the CUDA backend makes one launch.
        if (i + 1 < program.ops.size() && program.ops[i + 1].code == OpCode::KvStore) {
          const model::Op& store = program.ops[++i];
          backend_.rope_kv_store(ref(op.a), ints(op.b), op.rope, ref(store.a), ref(store.b), kv_destination(store));
          break;
        }
        backend_.rope(ref(op.a), ints(op.b), op.rope);
        break;
      }
      case OpCode::KvStore: backend_.kv_store(ref(op.a), ref(op.b), kv_destination(op)); break;
      case OpCode::Attention: {
        const backend::PagedKv kv = paged_kv(op);
        if (const model::Op* next = product_after(i, true)) {  // the output projection
          const ProductTail tail = tail_of(*next);
          backend_.attention_matmul(ref(op.a), kv, ints(program.positions), op.scale, ref(op.out), ref(next->b),
                                    tail.bias, tail.residual_or_null(), ref(next->out));
          ++i;
          break;
        }
        backend_.attention(ref(op.a), kv, ints(program.positions), op.scale, ref(op.out));
        break;
      }
      case OpCode::Add: backend_.add(ref(op.a), ref(op.b), ref(op.out)); break;
      case OpCode::Glu: {
        if (const model::Op* next = product_after(i, true)) {
          const ProductTail tail = tail_of(*next);
          backend_.glu_matmul(ref(op.a), ref(op.b), op.act, ref(op.out), ref(next->b), tail.bias,
                              tail.residual_or_null(), ref(next->out));
          ++i;
          break;
        }
        backend_.glu(ref(op.a), ref(op.b), op.act, ref(op.out));
        break;
      }
      case OpCode::GatherRows: backend_.gather_rows(ref(op.a), ints(op.b), ref(op.out)); break;
    }
  }
}

}  // namespace cellm::runtime
