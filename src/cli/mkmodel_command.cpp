// `cellm mkmodel`: a random-weight GGUF of a real model shape (model/random_model.h), for
// benchmarking shapes larger than the default models without downloading them.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "model/random_model.h"
#include "model/weight_mix.h"

namespace cellm::cli {
namespace {

struct MkmodelFlags {
  std::string arch;
  std::string preset;
  std::string type;
  std::string output;
  std::optional<uint64_t> seed;
  std::optional<int32_t> layers, embd, ff, heads, kv_heads, head_dim, vocab, context, window;
  bool fast = false;
  bool force = false;
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string type_names() {
  std::vector<std::string> names;
  for (DType t : model::random_model_types()) names.emplace_back(dtype_name(t));
  names.emplace_back(model::kQ4KMName);
  return joined(names);
}

// --type: one weight type for every matrix, or the name of a mix (q4_k_m).
void set_type(model::RandomModelSpec& s, const std::string& name) {
  if (const std::optional<model::WeightMix> mix = model::weight_mix_from_name(name)) {
    s.mix = *mix;
    return;
  }
  const std::optional<DType> type = dtype_from_name(name);
  const auto writable = model::random_model_types();
  if (!type || std::find(writable.begin(), writable.end(), *type) == writable.end())
    fail(ErrorCode::InvalidArgument, "--type ", name, " cannot be written (", type_names(), ")");
  s.type = *type;
}

model::RandomModelSpec make_spec(const MkmodelFlags& f) {
  model::RandomModelSpec s = model::random_model_preset(f.preset);
  if (!f.arch.empty() && f.arch != s.arch) {
    std::vector<std::string> matching;
    for (const auto& p : model::random_model_presets())
      if (model::random_model_preset(p).arch == f.arch) matching.push_back(p);
    fail(ErrorCode::InvalidArgument, "preset '", f.preset, "' is a ", s.arch, " model, not ", f.arch, " (", f.arch,
         " presets: ", joined(matching), ")");
  }
  if (!f.type.empty()) set_type(s, f.type);
  if (f.seed) s.seed = *f.seed;
  if (f.layers) s.n_layers = *f.layers;
  if (f.embd) s.n_embd = *f.embd;
  if (f.ff) s.n_ff = *f.ff;
  if (f.heads) s.n_heads = *f.heads;
  if (f.kv_heads) s.n_kv_heads = *f.kv_heads;
  if (f.head_dim) s.head_dim = *f.head_dim;
  if (f.vocab) s.vocab = *f.vocab;
  if (f.context) s.context = *f.context;
  if (f.window) s.sliding_window = *f.window;
  s.fast = f.fast;
  return s;
}

// Percent, size and speed on stderr: rewritten in place on a terminal, a line per 10% otherwise.
class Progress {
 public:
  explicit Progress(std::string path) : path_(std::move(path)), tty_(isatty(STDERR_FILENO) != 0) {}

  void operator()(uint64_t done, uint64_t total) {
    const int percent = total > 0 ? static_cast<int>(100 * done / total) : 100;
    if (!tty_ && percent / 10 == last_decile_) return;
    last_decile_ = percent / 10;
    std::fprintf(stderr, "%smkmodel: %s %3d%% (%.1f of %.1f MB, %.0f MB/s)%s", tty_ ? "\r" : "", path_.c_str(), percent,
                 done / 1e6, total / 1e6, mb_per_s(done), tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double mb_per_s(uint64_t bytes) const { return seconds() > 0 ? bytes / 1e6 / seconds() : 0.0; }
  void end() const {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  std::string path_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

int run_mkmodel(const MkmodelFlags& flags) {
  const model::RandomModelSpec spec = make_spec(flags);
  if (std::filesystem::exists(flags.output) && !flags.force)
    fail(ErrorCode::InvalidArgument, "'", flags.output, "' exists; pass --force to overwrite it");
  Progress progress(flags.output);
  const model::RandomModelSummary summary =
      model::write_random_model(spec, flags.output, [&progress](uint64_t done, uint64_t total) { progress(done, total); });
  progress.end();
  std::string fallback;
  if (summary.fallback_tensors > 0)
    fallback = str_cat(", ", summary.fallback_tensors, " whose rows are not whole ",
                       spec.mix == model::WeightMix::Uniform ? dtype_name(spec.type) : "k-quant",
                       " blocks in a fallback type");
  char size[96];
  std::snprintf(size, sizeof size, "%.1f MB in %.1f s (%.0f MB/s)", summary.file_bytes / 1e6, progress.seconds(),
                progress.mb_per_s(summary.file_bytes));
  log_info("mkmodel: wrote ", flags.output, ": ", spec.arch, " ", spec.name, ", ", model::weights_name(spec), ", ",
           spec.n_layers, " layers, ", summary.tensors, " tensors", fallback, ", ", size);
  return 0;
}

}  // namespace

void add_mkmodel_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<MkmodelFlags>();
  auto* cmd = app.add_subcommand(
      "mkmodel",
      "Write a random-weight GGUF model of a real shape (for benchmarks): weights N(0, 1/fan_in) quantized to "
      "--type, a byte-level tokenizer with ChatML specials. Matrices whose rows are not whole blocks of --type "
      "(tiny presets at a k-quant) fall back as llama.cpp does (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0).");
  cmd->add_option("--preset", flags->preset, "Model shape: " + joined(model::random_model_presets()))->required();
  cmd->add_option("--arch", flags->arch, "Architecture the preset must have")->check(CLI::IsMember({"llama", "gemma3"}));
  cmd->add_option("--type", flags->type,
                  "Weight type (default: the preset's): " + type_names() +
                      "; q4_k_m is llama.cpp's Q4_K_M mix, as real Q4_K_M files hold (q4_K, with the output and "
                      "about half the layers' attn_v and ffn_down in q6_K)");
  cmd->add_option("-o,--output", flags->output, "GGUF file to write")->required();
  cmd->add_option("--seed", flags->seed, "Seed of the weights (default: 1)");
  cmd->add_flag("--fast", flags->fast,
                "Build each matrix from random picks among 1024 quantized blocks instead of quantizing every "
                "weight: same format and value distribution, about 100x faster for the k-quants (use it for "
                "multi-GB presets such as llama3-8b)");
  cmd->add_flag("-f,--force", flags->force, "Overwrite an existing output file");
  auto* shape = cmd->add_option_group("Shape overrides", "Change the preset's shape");
  shape->add_option("--layers", flags->layers, "Transformer blocks")->check(CLI::Range(1, 1024));
  shape->add_option("--embd", flags->embd, "Embedding width")->check(CLI::Range(1, 1 << 16));
  shape->add_option("--ff", flags->ff, "Feed-forward width")->check(CLI::Range(1, 1 << 18));
  shape->add_option("--heads", flags->heads, "Attention heads")->check(CLI::Range(1, 1024));
  shape->add_option("--kv-heads", flags->kv_heads, "Key/value heads (divides --heads)")->check(CLI::Range(1, 1024));
  shape->add_option("--head-dim", flags->head_dim, "Width of one head")->check(CLI::Range(2, 1024));
  shape->add_option("--vocab", flags->vocab, "Vocabulary size (>= 260)")->check(CLI::Range(260, 1 << 22));
  shape->add_option("--ctx", flags->context, "Trained context length")->check(CLI::Range(1, 1 << 24));
  shape->add_option("--window", flags->window, "gemma3: sliding window of the local layers")->check(CLI::Range(1, 1 << 24));
  cmd->callback([flags, &action] { action = [flags] { return run_mkmodel(*flags); }; });
}

}  // namespace cellm::cli
