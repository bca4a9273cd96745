#pragma once
// A Program is the forward pass of one architecture compiled for one method (DESIGN.md §3):
// a list of values (weights, step inputs, activations, the logits output) and a list of ops
// over them. It owns no storage: weights are bound by the executor from the GGUF file, the KV
// pool and side buffers through the Manifest, activations from the plan made here once per
// method. Any backend runs it: the executor maps each op to a Backend call.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "kv/geometry.h"
#include "kv/manifest.h"

namespace cellm::model {

enum class Method {
  Decode,   // one token per sequence; static shape per batch bucket (CUDA-graph capturable)
  Prefill,  // a dynamic number of tokens in [min_tokens, max_tokens], prompts and decode rows mixed
};
const char* method_name(Method method);

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueKind {
  Weight,      // a GGUF tensor, bound by name
  Input,       // written by the executor each step: tokens, positions, logit_rows
  Activation,  // lives in the activation arena at the planned offset
  Output,      // the logits, also in the arena
};

// What the row count of a value follows.
enum class Extent {
  Fixed,      // weights: `rows` as declared
  Tokens,     // the step width T (at most max_tokens)
  LogitRows,  // K, the rows whose logits are wanted (at most max_tokens)
};

struct ValueInfo {
  std::string name;  // weights: the GGUF tensor name
  ValueKind kind = ValueKind::Activation;
  DType dtype = DType::F32;
  Extent extent = Extent::Tokens;
  int64_t rows = 0;  // Fixed: exact; otherwise the most (max_tokens)
  int64_t cols = 0;
  size_t arena_offset = 0;  // Activation/Output: planned byte offset
  // Weights stacked from several GGUF tensors of one type and width (their rows one after the
  // other, in this order), so projections of the same input run as one matmul. Empty: the
  // weight is the tensor `name`.
  std::vector<std::string> parts;
  // Activation views: columns [view_col, view_col + cols) of the activation `view_of`, which
  // owns the bytes (views take no arena space and keep their owner alive).
  ValueId view_of = kNoValue;
  int64_t view_col = 0;
};

enum class OpCode {
  Embed,       // out = table[a] * scale                    (a: tokens, b: table)
  RmsNorm,     // out = rmsnorm(a) * b over groups of `group`
  MatMul,      // out = a . b^T (+ c bias)                  (b: weight [out, in])
  MatMulAdd,   // out = c + a . b^T                         (c: residual rows, as a then Add would)
  Rope,        // a rotated in place at positions (b)
  KvStore,     // layer's K, V rows = a, b at the step's cells
  Attention,   // out = attention(a queries) over layer's cells, `scale`
  Add,         // out = a + b
  Glu,         // out = act(a) * b
  GatherRows,  // out = a[b] (b: logit_rows)
};
const char* op_name(OpCode code);

struct Op {
  OpCode code = OpCode::Add;
  ValueId out = kNoValue;
  ValueId a = kNoValue;
  ValueId b = kNoValue;
  ValueId c = kNoValue;
  int32_t layer = -1;
  float eps = 0;
  float scale = 1;
  int32_t group = 0;
  backend::RopeParams rope;
  backend::GluActivation act = backend::GluActivation::Silu;
  bool scale_queries = false;  // Attention: the model scales q rather than q.k (see PagedKv)
};

struct Program {
  std::string arch;
  Method method = Method::Prefill;
  int32_t max_tokens = 0;  // decode: the bucket size; prefill: max_write
  int32_t min_tokens = 0;  // decode: 1 (a bucket is padded up); prefill: the lower bound (2)
  int32_t vocab_size = 0;
  std::vector<ValueInfo> values;
  std::vector<Op> ops;
  // The step inputs and the output. The step width is read from `tokens`' extent.
  ValueId tokens = kNoValue;
  ValueId positions = kNoValue;
  ValueId logit_rows = kNoValue;
  ValueId logits = kNoValue;
  ValueId step_width_input = kNoValue;
  size_t arena_bytes = 0;  // activation arena, planned for max_tokens
  kv::Geometry geometry;
  kv::Manifest manifest;   // runtime-bound KV tensors (kv/manifest.h)

  const ValueInfo& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
  // Human-readable listing (for --dump-program and tests).
  std::string describe() const;
  // The weights a forward reads whole, each once: every weight an op reads, except an Embed's
  // table, of which it reads only the step's rows (unless another op reads it too, as the
  // output projection of a model whose output is tied to its embeddings). Their bytes are
  // what one decode step must stream, the numerator of a decode roofline.
  std::vector<ValueId> weights_read_whole() const;
};

}  // namespace cellm::model
