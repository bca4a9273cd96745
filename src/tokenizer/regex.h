#pragma once
// A compiled PCRE2 pattern (UTF + UCP, JIT when available) that finds successive matches in
// valid UTF-8. Immutable after construction, so one instance serves every thread.
#include <cstddef>
#include <string>
#include <string_view>

namespace cellm::tokenizer {

class Regex {
 public:
  explicit Regex(const std::string& pattern);  // Internal error if the pattern does not compile
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  struct Match {
    size_t begin = 0, end = 0;
  };
  // First match in `text` at or after byte `from` (a character boundary); false when none.
  bool find(std::string_view text, size_t from, Match& match) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  std::string pattern_;
};

}  // namespace cellm::tokenizer
