#include "server/shutdown_signal.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

namespace cellm::server {
namespace {

std::atomic<bool> requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "signal handlers need a lock-free flag");

void on_shutdown_signal(int) { requested.store(true); }

}  // namespace

void install_shutdown_signals() {
  struct sigaction action {};
  action.sa_handler = on_shutdown_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

bool shutdown_requested() { return requested.load(); }

void wait_for_shutdown_signal() {
  while (!shutdown_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace cellm::server
