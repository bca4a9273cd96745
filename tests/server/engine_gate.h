#pragma once
// Holds the runner's engine thread at a chosen point (a step or sample hook calls pass()), so
// a test can act - close a client's socket, wait until the server noticed - while the
// generations stand still at a known stage, then let them go on.
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace cellm::test {

class EngineGate {
 public:
  using Seconds = std::chrono::seconds;

  // Engine thread: returns at once while open; while held, waits for a permit or release.
  void pass() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++arrivals_;
    while (held_ && permits_ == 0) {
      blocked_ = true;
      cv_.notify_all();
      cv_.wait(lock);
    }
    blocked_ = false;
    if (held_) --permits_;
  }

  // From now on the engine stops at the next pass().
  void hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = true;
    permits_ = 0;
  }
  // Lets everything through.
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = false;
    cv_.notify_all();
  }
  // Until the engine waits in pass(). False after `limit`.
  bool wait_blocked(Seconds limit = Seconds(30)) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return blocked_; });
  }
  // Lets one pass() through and waits until the engine is held at the next one.
  bool step(Seconds limit = Seconds(30)) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t arrived = arrivals_;
    ++permits_;
    cv_.notify_all();
    return cv_.wait_for(lock, limit, [&] { return blocked_ && arrivals_ > arrived; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = false;
  bool blocked_ = false;
  int64_t permits_ = 0;
  int64_t arrivals_ = 0;
};

}  // namespace cellm::test
