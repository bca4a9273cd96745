// Tokenizer speed on the parity corpus (tests/data/tokenizer/corpus.jsonl, ~2,200 strings in
// a dozen scripts) and on one large English document, for both default models. Bytes/s in the
// output are MB/s of input text. Also: building each tokenizer from its opened GGUF.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/file.h"
#include "tokenizer/tokenizer.h"

namespace {

using cellm::tokenizer::Tokenizer;

// The source tree, found from this file's path (CMake compiles it by absolute path).
std::filesystem::path source_dir() { return std::filesystem::path(__FILE__).parent_path().parent_path(); }

std::string model_path(const std::string& file) {
  const char* dir = std::getenv("CELLM_MODELS_DIR");
  return ((dir ? std::filesystem::path(dir) : source_dir() / "models") / file).string();
}

struct Model {
  std::unique_ptr<cellm::gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};

const Model* model(const std::string& file) {
  static std::map<std::string, Model> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    Model m;
    if (std::filesystem::exists(model_path(file))) {
      m.file = cellm::gguf::File::open(model_path(file));
      m.tok = Tokenizer::from_gguf(*m.file);
    }
    it = cache.emplace(file, std::move(m)).first;
  }
  return it->second.tok ? &it->second : nullptr;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> strings = [] {
    std::vector<std::string> out;
    std::ifstream in(source_dir() / "tests/data/tokenizer/corpus.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).get<std::string>());
    return out;
  }();
  return strings;
}

// About 1 MB of English prose with the variety of real text (numbers, punctuation, newlines).
const std::string& english_document() {
  static const std::string text = [] {
    const char* sentences[] = {
        "The quick brown fox jumps over the lazy dog. ",
        "It's a truth universally acknowledged that tokenizers are harder than they look. ",
        "We'll meet at 10:30 a.m. on Tuesday, March 5th, 2024 - don't be late!\n",
        "Error rates fell by 37.5% after the update (from 8 to 5 per 1,000 requests). ",
        "A cache that lives off the compiled forward pass can be shared between sequences.\n\n",
        "Rain, sleet and snow: the forecast for the weekend looked grim. ",
        "She said, \"I've never seen anything like it,\" and walked away. ",
        "Supercalifragilisticexpialidocious is longer than antidisestablishmentarianism.\n",
    };
    std::string s;
    for (size_t i = 0; s.size() < (1u << 20); ++i) s += sentences[(i * 5 + i / 8) % 8];
    return s;
  }();
  return text;
}

void encode_corpus(benchmark::State& state, const char* file) {
  const Model* m = model(file);
  if (!m) return state.SkipWithError("model missing: run scripts/fetch-models");
  size_t bytes = 0, tokens = 0;
  for (const auto& s : corpus()) bytes += s.size();
  for (auto _ : state) {
    tokens = 0;
    for (const auto& s : corpus()) tokens += m->tok->encode(s).size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void encode_document(benchmark::State& state, const char* file) {
  const Model* m = model(file);
  if (!m) return state.SkipWithError("model missing: run scripts/fetch-models");
  const std::string& text = english_document();
  for (auto _ : state) benchmark::DoNotOptimize(m->tok->encode(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void decode_document(benchmark::State& state, const char* file) {
  const Model* m = model(file);
  if (!m) return state.SkipWithError("model missing: run scripts/fetch-models");
  const auto ids = m->tok->encode(english_document());
  for (auto _ : state) benchmark::DoNotOptimize(m->tok->decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * english_document().size()));
}

void load_tokenizer(benchmark::State& state, const char* file) {
  const Model* m = model(file);
  if (!m) return state.SkipWithError("model missing: run scripts/fetch-models");
  for (auto _ : state) benchmark::DoNotOptimize(Tokenizer::from_gguf(*m->file));
}

constexpr const char* kSmolLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGemma3 = "gemma-3-270m-q4_k_m.gguf";

BENCHMARK_CAPTURE(encode_corpus, smollm2, kSmolLM2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_corpus, gemma3, kGemma3)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_document, smollm2, kSmolLM2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_document, gemma3, kGemma3)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_document, smollm2, kSmolLM2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_document, gemma3, kGemma3)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(load_tokenizer, smollm2, kSmolLM2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(load_tokenizer, gemma3, kGemma3)->Unit(benchmark::kMillisecond);

}  // namespace
