// `cellm inspect`: what a GGUF model is, without loading its weights.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "batching/json_text.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "gguf/file.h"
#include "model/config.h"

namespace cellm::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
};

nlohmann::json token_entry(const gguf::File& f, const std::string& key) {
  const auto id = f.get_uint_or(key);
  if (!id) return nullptr;
  nlohmann::json entry = {{"id", *id}};
  if (f.has("tokenizer.ggml.tokens")) {
    const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (*id < tokens.size()) entry["text"] = tokens[*id];
  }
  return entry;
}

nlohmann::json describe(const gguf::File& f) {
  nlohmann::json j;
  j["file"] = f.name();
  j["file_bytes"] = f.file_size();
  j["gguf_version"] = f.version();
  j["architecture"] = f.has("general.architecture") ? f.get_string("general.architecture") : "";
  if (const std::string* name = f.find_string("general.name")) j["name"] = *name;
  try {
    const model::ModelConfig c = model::read_model_config(f);
    j["supported"] = true;
    auto& h = j["hyperparameters"];
    h["layers"] = c.n_layers;
    h["embedding_size"] = c.n_embd;
    h["feed_forward_size"] = c.n_ff;
    h["heads"] = c.n_heads;
    h["kv_heads"] = c.n_kv_heads;
    h["head_dim"] = c.head_dim;
    h["context_length"] = c.context_length;
    h["vocab_size"] = c.vocab_size;
    h["rms_norm_eps"] = c.rms_eps;
    h["rope_layout"] = backend::rope_layout_name(c.rope_layout);
    h["rope_dim"] = c.rope_dim;
    std::map<float, std::vector<int32_t>> bases;
    for (int32_t i = 0; i < c.n_layers; ++i) bases[c.layers[i].rope_base].push_back(i);
    h["rope_bases"] = nlohmann::json::array();
    for (const auto& [base, layers] : bases) h["rope_bases"].push_back({{"base", base}, {"layers", layers}});
    h["sliding_window"] = c.sliding_window;
    h["windowed_layers"] = c.windowed_layers();
    h["global_layers"] = c.global_layers();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unsupported) throw;
    j["supported"] = false;
    j["unsupported_reason"] = e.what();
  }
  auto& t = j["tokenizer"];
  if (const std::string* model = f.find_string("tokenizer.ggml.model")) t["model"] = *model;
  if (const std::string* pre = f.find_string("tokenizer.ggml.pre")) t["pre"] = *pre;
  t["tokens"] = f.has("tokenizer.ggml.tokens") ? f.get_array("tokenizer.ggml.tokens").size() : 0;
  t["merges"] = f.has("tokenizer.ggml.merges") ? f.get_array("tokenizer.ggml.merges").size() : 0;
  t["bos"] = token_entry(f, "tokenizer.ggml.bos_token_id");
  t["eos"] = token_entry(f, "tokenizer.ggml.eos_token_id");
  t["eot"] = token_entry(f, "tokenizer.ggml.eot_token_id");
  t["pad"] = token_entry(f, "tokenizer.ggml.padding_token_id");
  if (auto v = f.get_bool_or("tokenizer.ggml.add_bos_token")) t["add_bos"] = *v;
  if (auto v = f.get_bool_or("tokenizer.ggml.add_eos_token")) t["add_eos"] = *v;
  j["chat_template"] = f.has("tokenizer.chat_template");
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;
  for (const auto& tensor : f.tensors()) {
    auto& [count, bytes] = by_type[std::string(dtype_name(tensor.type))];
    ++count;
    bytes += tensor.bytes;
  }
  auto& tensors = j["tensors"];
  tensors["count"] = f.tensors().size();
  tensors["bytes"] = f.tensor_bytes();
  for (const auto& [type, cb] : by_type) tensors["by_type"][type] = {{"count", cb.first}, {"bytes", cb.second}};
  // Every tensor, in file order: what a roofline needs (the bytes a decode step streams).
  auto& list = tensors["list"] = nlohmann::json::array();
  for (const auto& tensor : f.tensors())
    list.push_back({{"name", tensor.name}, {"type", dtype_name(tensor.type)}, {"dims", tensor.dims}, {"bytes", tensor.bytes}});
  return j;
}

std::string join(const nlohmann::json& list) {
  std::string s;
  for (const auto& v : list) s += (s.empty() ? "" : " ") + v.dump();
  return s.empty() ? "none" : s;
}

void print_text(const nlohmann::json& j) {
  auto line = [](const char* label, const std::string& value) { std::printf("%-18s %s\n", label, value.c_str()); };
  line("file", j["file"].get<std::string>() + " (" + std::to_string(j["file_bytes"].get<uint64_t>()) +
                   " bytes, GGUF v" + std::to_string(j["gguf_version"].get<int>()) + ")");
  line("architecture", j["architecture"].get<std::string>() + (j.value("supported", false) ? "" : " (not supported)"));
  if (j.contains("name")) line("name", j["name"]);
  if (j.contains("hyperparameters")) {
    const auto& h = j["hyperparameters"];
    line("layers", h["layers"].dump());
    line("embedding size", h["embedding_size"].dump());
    line("feed-forward", h["feed_forward_size"].dump());
    line("heads", h["heads"].dump() + " (kv heads " + h["kv_heads"].dump() + ", head dim " + h["head_dim"].dump() + ")");
    line("context length", h["context_length"].dump());
    line("vocab size", h["vocab_size"].dump());
    line("rms norm eps", h["rms_norm_eps"].dump());
    line("rope", std::string(h["rope_layout"]) + ", " + h["rope_dim"].dump() + " dims");
    for (const auto& b : h["rope_bases"])
      line("rope base", b["base"].dump() + " on layers " + join(b["layers"]));
    if (h["sliding_window"].get<int>() > 0) {
      line("sliding window", h["sliding_window"].dump() + " tokens");
      line("windowed layers", join(h["windowed_layers"]));
      line("global layers", join(h["global_layers"]));
    } else {
      line("sliding window", "none (every layer sees the full history)");
    }
  } else if (j.contains("unsupported_reason")) {
    line("note", j["unsupported_reason"]);
  }
  const auto& t = j["tokenizer"];
  std::string tok = t.value("model", "none") + (t.contains("pre") ? " (pre " + t["pre"].get<std::string>() + ")" : "") +
                    ", " + t["tokens"].dump() + " tokens";
  if (t["merges"].get<uint64_t>() > 0) tok += ", " + t["merges"].dump() + " merges";
  line("tokenizer", tok);
  for (const char* key : {"bos", "eos", "eot", "pad"})
    if (!t[key].is_null())
      line((std::string("  ") + key).c_str(), t[key]["id"].dump() + (t[key].contains("text") ? " " + t[key]["text"].dump() : ""));
  if (t.contains("add_bos")) line("  add bos", t["add_bos"].dump());
  line("chat template", j["chat_template"].get<bool>() ? "present" : "absent");
  const auto& ts = j["tensors"];
  line("tensors", ts["count"].dump() + ", " + ts["bytes"].dump() + " bytes");
  for (const auto& [type, cb] : ts["by_type"].items())
    line(("  " + type).c_str(), cb["count"].dump() + " tensors, " + cb["bytes"].dump() + " bytes");
}

}  // namespace

void add_inspect_command(CLI::App& app, CommandAction& action) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "Describe a GGUF model: architecture, hyperparameters, tokenizer, tensors");
  cmd->add_option("-m,--model", opts->model, "GGUF model file (default: SmolLM2-135M-Instruct from models/)");
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  cmd->callback([opts, &action] {
    action = [opts] {
      const auto file = gguf::File::open(resolve_model_path(opts->model));
      const nlohmann::json j = describe(*file);
      if (opts->json) std::printf("%s\n", batching::json_text(j, 2).c_str());
      else print_text(j);
      return 0;
    };
  });
}

}  // namespace cellm::cli
