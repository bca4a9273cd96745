#pragma once
// What generations stream and how they end, collected for the runner tests, with a wait that
// fails the test instead of hanging it.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "batching/generation.h"

namespace cellm::test {

// Collects what generations stream and how they end, by id.
class Results {
 public:
  batching::GenerationCallbacks callbacks() {
    batching::GenerationCallbacks cb;
    cb.on_token = [this](batching::GenerationId id, int32_t, const std::string& text) {
      std::lock_guard<std::mutex> lock(mutex_);
      streamed_[id] += text;
    };
    cb.on_finish = [this](const batching::GenerationResult& r) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_[r.id] = r;
      cv_.notify_all();
    };
    return cb;
  }
  // Fails (instead of hanging) when the generation does not end within `limit`: a runner that
  // livelocks on a fault must fail its test, not the CI job's time limit.
  batching::GenerationResult wait(batching::GenerationId id, std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return done_.count(id) > 0; })) {
      ADD_FAILURE() << "generation " << id << " did not end within " << limit.count() << " s";
      return {};
    }
    return done_[id];
  }
  // The text streamed so far (token by token) for `id`.
  std::string streamed(batching::GenerationId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return streamed_[id];
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<batching::GenerationId, batching::GenerationResult> done_;
  std::map<batching::GenerationId, std::string> streamed_;
};

}  // namespace cellm::test
