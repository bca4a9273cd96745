#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace cellm::tokenizer {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Match data and a JIT stack per thread: matching allocates nothing after the first call.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (!data || !stack || !context) fail(ErrorCode::OutOfMemory, "PCRE2 match state allocation failed");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code)
    fail(ErrorCode::Internal, "tokenizer regex does not compile at offset ", offset, ": ", pcre2_message(error),
         "; pattern: ", pattern);
  // Without JIT (unsupported CPU) pcre2_match interprets the pattern: slower, same result.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view text, size_t from, Match& match) const {
  ThreadMatchState& state = thread_state();
  // The caller guarantees valid UTF-8, so PCRE2's own check (a full scan per call) is skipped.
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, state.data, state.context);
  // A huge run of one class (a megabyte of spaces) can outgrow the JIT stack; the interpreter
  // keeps its backtracking state on the heap instead.
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    fail(ErrorCode::Internal, "tokenizer regex failed (", pcre2_message(rc), ") on ", text.size(),
         " bytes; pattern: ", pattern_);
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  match.begin = ovector[0];
  match.end = ovector[1];
  return true;
}

}  // namespace cellm::tokenizer
