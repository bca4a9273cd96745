#include "model/program_builder.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace cellm::model {

ProgramBuilder::ProgramBuilder(const gguf::File& file, const ModelConfig& config, Method method, int32_t max_tokens)
    : file_(file) {
  if (max_tokens <= 0) fail(ErrorCode::InvalidArgument, "a program needs max_tokens > 0, got ", max_tokens);
  program_.arch = config.arch;
  program_.method = method;
  program_.max_tokens = max_tokens;
  program_.min_tokens = method == Method::Decode ? 1 : std::min(2, max_tokens);
  program_.vocab_size = config.vocab_size;
  std::vector<kv::LayerGeometry> layers;
  for (const LayerConfig& l : config.layers) layers.push_back({config.n_kv_heads, config.head_dim, l.window, DType::F16});
  program_.geometry = kv::Geometry(std::move(layers));
  kv::declare_kv_bindings(program_.manifest, program_.geometry, max_tokens);
  program_.tokens = add_value({"tokens", ValueKind::Input, DType::I32, Extent::Tokens, max_tokens, 1});
  program_.positions = add_value({"positions", ValueKind::Input, DType::I32, Extent::Tokens, max_tokens, 1});
  program_.logit_rows = add_value({"logit_rows", ValueKind::Input, DType::I32, Extent::LogitRows, max_tokens, 1});
  program_.step_width_input = program_.tokens;
}

ValueId ProgramBuilder::add_value(ValueInfo info) {
  program_.values.push_back(std::move(info));
  return static_cast<ValueId>(program_.values.size() - 1);
}

ValueId ProgramBuilder::activation(const std::string& name, int64_t cols, Extent extent) {
  return add_value({name, ValueKind::Activation, DType::F32, extent, program_.max_tokens, cols});
}

const gguf::TensorInfo& ProgramBuilder::matrix_tensor(const std::string& name, int64_t rows, int64_t cols) const {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  if (t == nullptr) fail(ErrorCode::Format, "model '", file_.name(), "' has no tensor '", name, "'");
  const int64_t t_rows = t->dims.size() > 1 ? t->dims[1] : 1;
  if (t->dims.size() > 2 || t->dims[0] != cols || t_rows != rows)
    fail(ErrorCode::Format, "tensor '", name, "' has shape [", t->dims[0], (t->dims.size() > 1 ? ", " : ""),
         (t->dims.size() > 1 ? std::to_string(t->dims[1]) : ""), "], expected [", cols, ", ", rows, "]");
  if (!dtype_info(t->type).weight_format)
    fail(ErrorCode::Unsupported, "tensor '", name, "' is ", dtype_name(t->type), ", which cellm cannot compute with");
  return *t;
}

ValueId ProgramBuilder::find_weight(const std::string& name) const {
  for (ValueId id = 0; id < static_cast<ValueId>(program_.values.size()); ++id)
    if (program_.values[id].kind == ValueKind::Weight && program_.values[id].name == name) return id;
  return kNoValue;
}

ValueId ProgramBuilder::weight(const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo& t = matrix_tensor(name, rows, cols);
  if (const ValueId known = find_weight(name); known != kNoValue) return known;
  return add_value({name, ValueKind::Weight, t.type, Extent::Fixed, rows, cols});
}

std::vector<ValueId> ProgramBuilder::projections(ValueId x, const std::vector<std::pair<std::string, int64_t>>& weights,
                                                 bool stack) {
  const int64_t cols = info(x).cols;
  std::vector<ValueId> results;
  for (size_t first = 0; first < weights.size();) {
    // The run of weights from `first` that share its type.
    const DType type = matrix_tensor(weights[first].first, weights[first].second, cols).type;
    size_t end = first + 1;
    while (stack && end < weights.size() && matrix_tensor(weights[end].first, weights[end].second, cols).type == type)
      ++end;
    if (end - first == 1) {
      results.push_back(matmul(x, weight(weights[first].first, weights[first].second, cols)));
      first = end;
      continue;
    }
    ValueInfo stacked{"", ValueKind::Weight, type, Extent::Fixed, 0, cols};
    for (size_t i = first; i < end; ++i) {
      if (i != first) stacked.name += '+';
      stacked.name += weights[i].first;
      stacked.parts.push_back(weights[i].first);
      stacked.rows += weights[i].second;
    }
    ValueId w = find_weight(stacked.name);
    if (w == kNoValue) w = add_value(std::move(stacked));
    const ValueId out = matmul(x, w);
    int64_t col = 0;
    for (size_t i = first; i < end; ++i) {
      results.push_back(view(out, col, weights[i].second, weights[i].first));
      col += weights[i].second;
    }
    first = end;
  }
  return results;
}

ValueId ProgramBuilder::view(ValueId x, int64_t col, int64_t cols, const std::string& name) {
  const ValueInfo& owner = info(x);
  if (owner.kind != ValueKind::Activation || col < 0 || cols <= 0 || col + cols > owner.cols)
    fail(ErrorCode::Internal, "view [", col, ", ", col + cols, ") of '", owner.name, "' (", owner.cols, " columns)");
  ValueInfo v{name, ValueKind::Activation, DType::F32, owner.extent, owner.rows, cols};
  // A view of a view is a view of its owner.
  v.view_of = owner.view_of == kNoValue ? x : owner.view_of;
  v.view_col = owner.view_col + col;
  return add_value(std::move(v));
}

ValueId ProgramBuilder::joined_view(ValueId a, ValueId b) {
  const ValueInfo& va = info(a);
  const ValueInfo& vb = info(b);
  if (va.view_of == kNoValue || va.view_of != vb.view_of || va.view_col + va.cols != vb.view_col) return kNoValue;
  return view(va.view_of, va.view_col, va.cols + vb.cols, va.name + "+" + vb.name);
}

void ProgramBuilder::require_cols(ValueId id, int64_t cols, const char* what) const {
  if (info(id).cols != cols)
    fail(ErrorCode::Format, what, ": '", info(id).name, "' has ", info(id).cols, " features, expected ", cols);
}

ValueId ProgramBuilder::push(Op op, const std::string& out_name, int64_t out_cols, Extent extent) {
  if (!out_name.empty()) op.out = activation(out_name, out_cols, extent);
  program_.ops.push_back(op);
  return op.out;
}

ValueId ProgramBuilder::embed(ValueId tokens, ValueId table, float scale) {
  Op op{.code = OpCode::Embed, .a = tokens, .b = table, .scale = scale};
  return push(op, "embd", info(table).cols, Extent::Tokens);
}

ValueId ProgramBuilder::rms_norm(ValueId x, ValueId weight, float eps, int32_t group) {
  const int64_t cols = info(x).cols;
  if (group == 0) group = static_cast<int32_t>(cols);
  require_cols(weight, group, "rms_norm weight");
  if (cols % group != 0) fail(ErrorCode::Internal, "rms_norm group ", group, " does not divide ", cols);
  Op op{.code = OpCode::RmsNorm, .a = x, .b = weight, .eps = eps, .group = group};
  return push(op, info(weight).name, cols, info(x).extent);
}

ValueId ProgramBuilder::matmul(ValueId x, ValueId w, ValueId bias) {
  require_cols(x, info(w).cols, ("matmul by " + info(w).name).c_str());
  if (bias != kNoValue) require_cols(bias, info(w).rows, "matmul bias");
  Op op{.code = OpCode::MatMul, .a = x, .b = w, .c = bias};
  return push(op, info(w).name, info(w).rows, info(x).extent);
}

ValueId ProgramBuilder::matmul_add(ValueId x, ValueId w, ValueId residual) {
  require_cols(x, info(w).cols, ("matmul by " + info(w).name).c_str());
  require_cols(residual, info(w).rows, "matmul_add residual");
  Op op{.code = OpCode::MatMulAdd, .a = x, .b = w, .c = residual};
  return push(op, "residual", info(w).rows, info(x).extent);
}

void ProgramBuilder::rope(ValueId x, ValueId positions, const backend::RopeParams& params) {
  require_cols(x, static_cast<int64_t>(params.n_heads) * params.head_dim, "rope");
  Op op{.code = OpCode::Rope, .a = x, .b = positions, .rope = params};
  push(op, "", 0, Extent::Tokens);
}

void ProgramBuilder::kv_store(int32_t layer, ValueId k, ValueId v) {
  const kv::LayerGeometry& g = program_.geometry.layer(layer);
  require_cols(k, static_cast<int64_t>(g.n_kv_heads) * g.head_dim, "kv_store K");
  require_cols(v, static_cast<int64_t>(g.n_kv_heads) * g.head_dim, "kv_store V");
  Op op{.code = OpCode::KvStore, .a = k, .b = v, .layer = layer};
  push(op, "", 0, Extent::Tokens);
}

ValueId ProgramBuilder::attention(int32_t layer, ValueId q, float scale, bool scale_queries) {
  const kv::LayerGeometry& g = program_.geometry.layer(layer);
  if (info(q).cols % (static_cast<int64_t>(g.n_kv_heads) * g.head_dim) != 0)
    fail(ErrorCode::Format, "attention: ", info(q).cols, " query features are not a multiple of the KV heads");
  Op op{.code = OpCode::Attention, .a = q, .layer = layer, .scale = scale, .scale_queries = scale_queries};
  return push(op, "attn." + std::to_string(layer), info(q).cols, Extent::Tokens);
}

ValueId ProgramBuilder::add(ValueId a, ValueId b) {
  require_cols(b, info(a).cols, "add");
  Op op{.code = OpCode::Add, .a = a, .b = b};
  return push(op, "residual", info(a).cols, info(a).extent);
}

ValueId ProgramBuilder::glu(ValueId gate, ValueId up, backend::GluActivation act) {
  require_cols(up, info(gate).cols, "glu");
  Op op{.code = OpCode::Glu, .a = gate, .b = up, .act = act};
  return push(op, "glu", info(gate).cols, info(gate).extent);
}

ValueId ProgramBuilder::gather_rows(ValueId x, ValueId rows) {
  Op op{.code = OpCode::GatherRows, .a = x, .b = rows};
  return push(op, "selected", info(x).cols, Extent::LogitRows);
}

Program ProgramBuilder::finish(ValueId logits) {
  program_.values[logits].kind = ValueKind::Output;
  program_.values[logits].name = "logits";
  program_.logits = logits;
  if (info(logits).cols != program_.vocab_size) program_.vocab_size = static_cast<int32_t>(info(logits).cols);
  program_.arena_bytes = plan_activation_arena(program_);
  return std::move(program_);
}

size_t plan_activation_arena(Program& program) {
  constexpr size_t kAlign = 64;
  const size_t n = program.values.size();
  std::vector<int> first(n, -1), last(n, -1);
  auto touch = [&](ValueId id, int op) {
    if (id == kNoValue) return;
    if (program.values[id].view_of != kNoValue) id = program.values[id].view_of;  // a view uses its owner's bytes
    if (first[id] < 0) first[id] = op;
    last[id] = op;
  };
  for (int i = 0; i < static_cast<int>(program.ops.size()); ++i) {
    const Op& op = program.ops[i];
    touch(op.out, i);
    touch(op.a, i);
    touch(op.b, i);
    touch(op.c, i);
  }
  if (program.logits != kNoValue) last[program.logits] = static_cast<int>(program.ops.size());  // read after the run
  // Greedy first fit in order of definition: a value may reuse bytes whose owner died before
  // the op that defines it (strictly before: an op never writes over its own inputs).
  struct Block {
    size_t offset, size;
    int dies;
  };
  std::vector<Block> live;
  size_t arena = 0;
  std::vector<ValueId> order;
  for (ValueId id = 0; id < static_cast<ValueId>(n); ++id) {
    const ValueInfo& v = program.values[id];
    if ((v.kind == ValueKind::Activation || v.kind == ValueKind::Output) && v.view_of == kNoValue && first[id] >= 0)
      order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](ValueId a, ValueId b) { return first[a] < first[b]; });
  for (ValueId id : order) {
    ValueInfo& v = program.values[id];
    const size_t size = (static_cast<size_t>(v.rows) * v.cols * sizeof(float) + kAlign - 1) / kAlign * kAlign;
    std::erase_if(live, [&](const Block& b) { return b.dies < first[id]; });
    std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
    size_t offset = 0;
    for (const Block& b : live) {
      if (offset + size <= b.offset) break;
      offset = std::max(offset, b.offset + b.size);
    }
    v.arena_offset = offset;
    live.push_back({offset, size, last[id]});
    arena = std::max(arena, offset + size);
  }
  return arena;
}

}  // namespace cellm::model
