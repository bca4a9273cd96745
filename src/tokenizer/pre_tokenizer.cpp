#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/error.h"
#include "tokenizer/regex.h"

namespace cellm::tokenizer {
namespace {

// The split regexes of the tokenizer.json files these vocabularies were trained with.
// GPT-2's word split.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (and Qwen 2 with single digits): case-insensitive contractions, a letter run may
// take one leading non-letter, digits in groups, newlines kept apart from other whitespace.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kEachDigit = R"(\p{N})";

struct Variant {
  std::vector<const char*> patterns;
  bool ignore_merges = false;
};

// Aliases group the names converters write for the same split.
const std::map<std::string, Variant>& variants() {
  static const std::map<std::string, Variant> table = [] {
    std::map<std::string, Variant> t;
    // llama.cpp's fallback for "default": punctuation runs, the GPT-2 split, digit runs, triples.
    const Variant default_bpe{{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}};
    const Variant gpt2{{kGpt2}};
    const Variant digits_then_gpt2{{kEachDigit, kGpt2}};  // SmolLM, StarCoder: one token per digit
    const Variant llama3{{kLlama3}, true};
    const Variant qwen2{{kQwen2}};
    t["default"] = default_bpe;
    for (const char* n : {"gpt2", "gpt-2", "mpt", "olmo", "phi-2"}) t[n] = gpt2;
    for (const char* n : {"smollm", "starcoder", "refact", "command-r", "codeshell"}) t[n] = digits_then_gpt2;
    for (const char* n : {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}) t[n] = llama3;
    for (const char* n : {"qwen2", "deepseek-r1-qwen", "megrez"}) t[n] = qwen2;
    return t;
  }();
  return table;
}

// Compiled regexes are shared by every tokenizer of the process.
std::shared_ptr<const Regex> compiled(const char* pattern) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Regex>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[pattern];
  if (!slot) slot = std::make_shared<const Regex>(with_unicode_whitespace(pattern));
  return slot;
}

void split_one(const Regex& regex, std::string_view text, std::vector<std::string_view>& out) {
  size_t pos = 0;
  Regex::Match m;
  while (pos < text.size() && regex.find(text, pos, m)) {
    if (m.end == m.begin) {  // none of our patterns matches empty; guard against looping anyway
      break;
    }
    if (m.begin > pos) out.push_back(text.substr(pos, m.begin - pos));
    out.push_back(text.substr(m.begin, m.end - m.begin));
    pos = m.end;
  }
  if (pos < text.size()) out.push_back(text.substr(pos));
}

}  // namespace

std::string with_unicode_whitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? R"(\s\x{85})" : R"([\s\x{85}])";
      } else if (e == 'S' && !in_class) {
        out += R"([^\s\x{85}])";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

PreTokenizer PreTokenizer::by_name(const std::string& name) {
  const auto it = variants().find(name);
  if (it == variants().end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    fail(ErrorCode::Unsupported, "pre-tokenizer '", name, "' (tokenizer.ggml.pre) is not supported; known: ", known);
  }
  PreTokenizer p;
  for (const char* pattern : it->second.patterns) p.regexes_.push_back(compiled(pattern));
  p.ignore_merges_ = it->second.ignore_merges;
  return p;
}

std::vector<std::string> PreTokenizer::names() {
  std::vector<std::string> out;
  for (const auto& [name, variant] : variants()) out.push_back(name);
  return out;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  const size_t first = pieces.size();
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    next.clear();
    for (size_t i = first; i < pieces.size(); ++i) split_one(*regex, pieces[i], next);
    pieces.resize(first);
    pieces.insert(pieces.end(), next.begin(), next.end());
  }
}

}  // namespace cellm::tokenizer
