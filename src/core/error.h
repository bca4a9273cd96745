#pragma once
// Errors are exceptions carrying a category, so front ends can map them to exit codes and
// HTTP statuses without parsing messages. Messages name the offending thing (key, field,
// byte offset, limit) because "invalid input" alone helps nobody.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace cellm {

enum class ErrorCode {
  InvalidArgument,  // a caller passed something wrong (bad flag, bad position, bad JSON)
  Format,           // a file or payload is malformed (corrupt GGUF, bad tokenizer data)
  NotFound,         // a key, tensor, file or session does not exist
  Unsupported,      // well-formed but not implemented (unknown architecture, quant type)
  OutOfMemory,      // an allocation failed or a configured memory limit was reached
  LimitExceeded,    // a configured limit (context, sessions, queue) would be exceeded
  Io,               // the operating system refused a file operation
  Internal,         // a broken invariant: a bug in cellm
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Concatenates its arguments with operator<<; the building block of error messages.
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, Args&&... args) {
  throw Error(code, str_cat(std::forward<Args>(args)...));
}

}  // namespace cellm
