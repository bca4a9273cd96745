#pragma once
// What a fuzz target may and may not do with an input. Refusing it with a cellm::Error is
// fine; any other exception escapes to libFuzzer (std::terminate: a finding), and a broken
// invariant aborts through FUZZ_CHECK so that libFuzzer keeps the input that broke it.
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace cellm::fuzz {

[[noreturn]] inline void check_failed(const char* condition, const char* file, int line, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n  %s\n", file, line, condition, detail.c_str());
  std::abort();
}

// Runs `step`; true when it refused its input with a cellm::Error.
template <typename Step>
bool refused(Step&& step) {
  try {
    step();
    return false;
  } catch (const Error&) {
    return true;
  }
}

}  // namespace cellm::fuzz

#define FUZZ_CHECK(condition, ...)                                                                   \
  do {                                                                                               \
    if (!(condition)) ::cellm::fuzz::check_failed(#condition, __FILE__, __LINE__, ::cellm::str_cat(__VA_ARGS__)); \
  } while (0)
