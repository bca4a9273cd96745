#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace cellm::tokenizer {

std::string StreamDecoder::push(int32_t id) {
  tokenizer_->append_piece(id, state_, pending_, options_);
  const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  out.swap(pending_);
  state_ = DecodeState{};
  return out;
}

}  // namespace cellm::tokenizer
