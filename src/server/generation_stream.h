#pragma once
// The channel between one generation on the engine thread and the HTTP handler that answers
// for it: the runner's callbacks push text and, at the end, the result; the handler waits
// with a timeout (so it can check its connection in between) and takes what has arrived.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include "batching/generation.h"

namespace cellm::server {

class GenerationStream {
 public:
  // Engine thread.
  void push_text(const std::string& text);
  void finish(const batching::GenerationResult& result);

  struct Update {
    std::string text;                                  // everything pushed since the last update
    std::optional<batching::GenerationResult> result;  // once, with the last text
  };
  // Returns as soon as text or the result is there, or after `timeout` with nothing.
  Update next(std::chrono::milliseconds timeout);
  bool finished() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;
  std::optional<batching::GenerationResult> result_;
  bool finished_ = false;
};

}  // namespace cellm::server
