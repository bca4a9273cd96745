#include "server/generation_stream.h"

namespace cellm::server {

void GenerationStream::push_text(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    text_ += text;
  }
  changed_.notify_all();
}

void GenerationStream::finish(const batching::GenerationResult& result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = result;
    finished_ = true;
  }
  changed_.notify_all();
}

GenerationStream::Update GenerationStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !text_.empty() || result_.has_value(); });
  Update update;
  update.text.swap(text_);
  update.result.swap(result_);
  return update;
}

bool GenerationStream::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

}  // namespace cellm::server
