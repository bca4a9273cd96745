#pragma once
// Builds a Program op by op: each call validates its operands (weight names and shapes against
// the GGUF file, feature sizes against each other) and returns the value it defines, so an
// architecture reads as its forward pass. finish() plans the activation arena.
#include <string>
#include <utility>
#include <vector>

#include "gguf/file.h"
#include "model/config.h"
#include "model/program.h"

namespace cellm::model {

class ProgramBuilder {
 public:
  ProgramBuilder(const gguf::File& file, const ModelConfig& config, Method method, int32_t max_tokens);

  // A GGUF tensor used as a matrix [rows = outputs, cols = inputs] or a vector (rows = 1).
  // Throws Format naming the tensor when it is missing or its shape is not rows x cols.
  ValueId weight(const std::string& name, int64_t rows, int64_t cols);
  ValueId vector_weight(const std::string& name, int64_t n) { return weight(name, 1, n); }
  bool has_tensor(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

  ValueId embed(ValueId tokens, ValueId table, float scale);
  ValueId rms_norm(ValueId x, ValueId weight, float eps, int32_t group = 0);
  ValueId matmul(ValueId x, ValueId w, ValueId bias = kNoValue);
  // residual + x . w^T: a matmul and the Add after it in one op (a backend may fuse them).
  ValueId matmul_add(ValueId x, ValueId w, ValueId residual);
  // Projections of one input x by the named weights [rows_i x cols(x)], one result per weight.
  // Neighbours of one type run as one matmul over their stacked rows (one activation
  // quantization and one launch instead of several; each output element is the same dot
  // product either way) and each result is a column view of its output. `stack` false: one
  // matmul per weight (CELLM_STACK_PROJECTIONS=0 sets it, to measure what stacking buys).
  std::vector<ValueId> projections(ValueId x, const std::vector<std::pair<std::string, int64_t>>& weights,
                                   bool stack);
  // Columns [col, col + cols) of activation x, sharing its bytes.
  ValueId view(ValueId x, int64_t col, int64_t cols, const std::string& name);
  // A view covering a and b when b's columns directly follow a's in one activation (so one
  // row-wise op can treat both); kNoValue otherwise.
  ValueId joined_view(ValueId a, ValueId b);
  void rope(ValueId x, ValueId positions, const backend::RopeParams& params);
  void kv_store(int32_t layer, ValueId k, ValueId v);
  ValueId attention(int32_t layer, ValueId q, float scale, bool scale_queries);
  ValueId add(ValueId a, ValueId b);
  ValueId glu(ValueId gate, ValueId up, backend::GluActivation act);
  ValueId gather_rows(ValueId x, ValueId rows);

  Program& program() { return program_; }
  // Marks `logits` as the output and plans the arena; the builder is spent afterwards.
  Program finish(ValueId logits);

 private:
  ValueId add_value(ValueInfo info);
  ValueId activation(const std::string& name, int64_t cols, Extent extent);
  ValueId push(Op op, const std::string& out_name, int64_t out_cols, Extent extent);
  const ValueInfo& info(ValueId id) const { return program_.value(id); }
  void require_cols(ValueId id, int64_t cols, const char* what) const;
  const gguf::TensorInfo& matrix_tensor(const std::string& name, int64_t rows, int64_t cols) const;
  ValueId find_weight(const std::string& name) const;

  const gguf::File& file_;
  Program program_;
};

// Assigns arena offsets to activations so values whose lifetimes do not overlap share bytes.
// Returns the arena size. Exposed for tests.
size_t plan_activation_arena(Program& program);

}  // namespace cellm::model
