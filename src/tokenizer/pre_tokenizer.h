#pragma once
// The split that byte-level BPE runs before merging: text is cut into words by one or more
// regexes, as named by tokenizer.ggml.pre. Each regex splits every piece the previous one left;
// matched and unmatched spans both become pieces (Hugging Face's "isolated" split).
// Regexes run in PCRE2 with UTF + UCP semantics and are JIT-compiled when the platform allows.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::tokenizer {

class Regex;

class PreTokenizer {
 public:
  // Throws Unsupported naming the unknown pre-tokenizer and listing the known names.
  static PreTokenizer by_name(const std::string& name);
  // Known names of tokenizer.ggml.pre, sorted.
  static std::vector<std::string> names();

  // Whether a word that is itself a token skips merging (llama3-style "ignore_merges").
  bool ignore_merges() const { return ignore_merges_; }

  // Appends the pieces of `text` (valid UTF-8) to `pieces`; they tile `text` in order.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  std::vector<std::shared_ptr<const Regex>> regexes_;
  bool ignore_merges_ = false;
};

// Rewrites \s and \S so that they also cover U+0085 (NEXT LINE), which is Unicode White_Space
// (and whitespace to Python, Rust and llama.cpp) but not in PCRE2's \s. Exposed for tests.
std::string with_unicode_whitespace(std::string_view pattern);

}  // namespace cellm::tokenizer
