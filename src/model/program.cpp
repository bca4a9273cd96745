#include "model/program.h"

#include <sstream>

namespace cellm::model {

const char* method_name(Method method) { return method == Method::Decode ? "decode" : "prefill"; }

const char* op_name(OpCode code) {
  switch (code) {
    case OpCode::Embed: return "embed";
    case OpCode::RmsNorm: return "rms_norm";
    case OpCode::MatMul: return "matmul";
    case OpCode::MatMulAdd: return "matmul_add";
    case OpCode::Rope: return "rope";
    case OpCode::KvStore: return "kv_store";
    case OpCode::Attention: return "attention";
    case OpCode::Add: return "add";
    case OpCode::Glu: return "glu";
    case OpCode::GatherRows: return "gather_rows";
  }
  return "?";
}

std::string Program::describe() const {
  std::ostringstream out;
  out << arch << " " << method_name(method) << " program: tokens " << min_tokens << ".." << max_tokens << ", "
      << ops.size() << " ops, " << values.size() << " values, activation arena " << arena_bytes << " bytes\n";
  auto name = [&](ValueId id) { return id == kNoValue ? std::string("-") : values[id].name; };
  for (const Op& op : ops) {
    out << "  " << op_name(op.code);
    if (op.layer >= 0) out << "[" << op.layer << "]";
    out << " " << name(op.a);
    if (op.b != kNoValue) out << ", " << name(op.b);
    if (op.c != kNoValue) out << ", " << name(op.c);
    if (op.out != kNoValue) out << " -> " << name(op.out) << " @" << values[op.out].arena_offset;
    out << "\n";
  }
  return out.str();
}

std::vector<ValueId> Program::weights_read_whole() const {
  std::vector<bool> whole(values.size(), false);
  for (const Op& op : ops)
    for (const ValueId id : {op.a, op.b, op.c}) {
      const bool embed_table = op.code == OpCode::Embed && id == op.b;
      if (id != kNoValue && value(id).kind == ValueKind::Weight && !embed_table) whole[static_cast<size_t>(id)] = true;
    }
  std::vector<ValueId> ids;
  for (ValueId id = 0; id < static_cast<ValueId>(values.size()); ++id)
    if (whole[static_cast<size_t>(id)]) ids.push_back(id);
  return ids;
}

}  // namespace cellm::model
