// fuzz_tokenizer: any bytes through encode and decode of every default model's tokenizer.
//
// Input: [tokenizer selector][skip_special bit][text...]. The text is encoded with and without
// special-token parsing and must decode back to itself (as far as the vocabulary can hold
// it); the same ids streamed through a StreamDecoder must join to decode()'s text. The text
// is also read as token ids - raw int32s, most outside the vocabulary, which must be refused
// with cellm::Error, and the same values folded into the vocabulary - and decoded both ways.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/check.h"
#include "support/input.h"
#include "support/tokenizers.h"
#include "tokenizer/stream_decoder.h"

namespace {

using cellm::fuzz::refused;
using cellm::tokenizer::DecodeOptions;
using cellm::tokenizer::StreamDecoder;
using cellm::tokenizer::Tokenizer;

bool in_vocabulary(const Tokenizer& tok, int32_t id) { return id >= 0 && static_cast<size_t>(id) < tok.vocab_size(); }

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, const DecodeOptions& options) {
  StreamDecoder stream(tok, options);
  std::string joined;
  for (int32_t id : ids) joined += stream.push(id);
  return joined + stream.finish();
}

// Decoding refuses exactly the sequences holding an id outside the vocabulary, and streaming
// gives the same text as decoding in one go.
void check_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, const DecodeOptions& options) {
  bool all_known = true;
  for (int32_t id : ids) all_known &= in_vocabulary(tok, id);
  std::string text;
  const bool decode_refused = refused([&] { text = tok.decode(ids, options); });
  FUZZ_CHECK(decode_refused == !all_known, "decode of ", ids.size(), " ids: refused=", decode_refused);
  if (!all_known) {
    FUZZ_CHECK(refused([&] { stream_decode(tok, ids, options); }), "streaming an unknown id was not refused");
    return;
  }
  const std::string streamed = stream_decode(tok, ids, options);
  FUZZ_CHECK(streamed == text, "streamed ", streamed.size(), " bytes differ from decode's ", text.size());
}

std::vector<int32_t> raw_ids(std::string_view bytes) {
  std::vector<int32_t> ids(bytes.size() / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * sizeof(int32_t));
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cellm::fuzz::fuzz_tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cellm::fuzz::FuzzInput in(data, size);
  const Tokenizer& tok = cellm::fuzz::pick_tokenizer(in.byte());
  const DecodeOptions options{.skip_special = (in.byte() & 1) != 0};
  const std::string_view text = in.rest();

  check_decode(tok, cellm::fuzz::encode_checked(tok, text, false), options);
  check_decode(tok, cellm::fuzz::encode_checked(tok, text, true), options);

  std::vector<int32_t> ids = raw_ids(text);
  check_decode(tok, ids, options);
  // Folded into [0, vocab_size]: nearly all known, the last value one past the end.
  for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % (tok.vocab_size() + 1));
  check_decode(tok, ids, options);
  return 0;
}
