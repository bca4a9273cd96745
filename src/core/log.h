#pragma once
// Minimal leveled logging to stderr. Text output goes to stdout; everything about how the
// engine is doing (load progress, warnings, speed) goes here.
#include <string>

#include "core/error.h"

namespace cellm {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Quiet = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(Args&&... args) {
  if (log_level() <= LogLevel::Info) log_message(LogLevel::Info, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(Args&&... args) {
  if (log_level() <= LogLevel::Warn) log_message(LogLevel::Warn, str_cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_level() <= LogLevel::Debug) log_message(LogLevel::Debug, str_cat(std::forward<Args>(args)...));
}

}  // namespace cellm
