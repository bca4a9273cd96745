#pragma once
// Streams generated text while watching for stop strings: text that could still be the start
// of a stop string is held back until it is decided, so a client never sees part of a stop
// string and the streamed text always equals the final text.
#include <string>
#include <vector>

namespace cellm::batching {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds text; returns the text now safe to emit. After a match, stopped() is true and the
  // text up to the stop string has been emitted.
  std::string push(const std::string& text);
  // The held-back text, at the end of a generation that did not stop on a string.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace cellm::batching
