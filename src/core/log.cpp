#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace cellm {
namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log_message(LogLevel level, const std::string& message) {
  static const char* const kPrefix[] = {"debug: ", "", "warning: ", "error: ", ""};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s%s\n", kPrefix[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

}  // namespace cellm
