#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "gguf/file.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/spm_model.h"

namespace cellm::tokenizer {
namespace {

// What each token stands for when decoded (llama.cpp's token_to_piece): normal tokens are
// un-spelled, byte tokens become their byte, control and user-defined tokens keep their text,
// unused and undefined tokens decode to nothing.
StringArena build_pieces(const Vocab& v) {
  StringArena pieces;
  pieces.reserve(v.size(), v.size() * 8);
  for (size_t i = 0; i < v.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string_view text = v.texts[id];
    switch (v.types[i]) {
      case TokenType::Normal:
        if (v.kind == VocabKind::ByteLevelBpe) {
          const auto raw = byte_level::unspell(text);
          pieces.push_back(raw ? std::string_view(*raw) : text);
        } else {
          pieces.push_back(unescape_spaces(text));
        }
        break;
      case TokenType::Byte: {
        const auto it = std::find(v.byte_tokens.begin(), v.byte_tokens.end(), id);
        if (it != v.byte_tokens.end()) {
          const char byte = static_cast<char>(it - v.byte_tokens.begin());
          pieces.push_back(std::string_view(&byte, 1));
        } else {
          pieces.push_back(text);
        }
        break;
      }
      case TokenType::Control:
      case TokenType::Unknown:
      case TokenType::UserDefined:
        pieces.push_back(text);
        break;
      case TokenType::Unused:
      case TokenType::Undefined:
        pieces.push_back({});
        break;
    }
  }
  return pieces;
}

SpecialMatcher build_special_matcher(const Vocab& v) {
  SpecialMatcher m;
  for (size_t i = 0; i < v.size(); ++i) {
    const TokenType t = v.types[i];
    if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined)
      m.add(v.texts[static_cast<int32_t>(i)], static_cast<int32_t>(i), t == TokenType::UserDefined);
  }
  return m;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Tokenizer> t(new Tokenizer(Vocab::from_gguf(file)));
  const Vocab& v = t->vocab_;
  if (v.kind == VocabKind::ByteLevelBpe) {
    PreTokenizer pre = PreTokenizer::by_name(v.pre);
    if (!file.has("tokenizer.ggml.merges"))
      fail(ErrorCode::Format, "GGUF '", file.name(), "': a gpt2 tokenizer needs tokenizer.ggml.merges");
    t->bpe_ = std::make_unique<BpeModel>(v, file.get_string_array("tokenizer.ggml.merges"), std::move(pre));
  } else {
    t->spm_ = std::make_unique<SpmModel>(v);
  }
  t->pieces_ = build_pieces(v);
  t->specials_ = build_special_matcher(v);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log_debug("tokenizer: ", v.model, " (pre '", v.pre, "'), ", v.size(), " tokens, loaded in ", ms, " ms");
  return t;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_.size())
    fail(ErrorCode::InvalidArgument, "token id ", id, " is outside the vocabulary of ", vocab_.size(), " tokens");
}

std::string_view Tokenizer::piece(int32_t id) const {
  check_id(id);
  return pieces_[static_cast<size_t>(id)];
}

std::string_view Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return vocab_.texts[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return vocab_.types[id];
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(vocab_.end_of_generation.begin(), vocab_.end_of_generation.end(), id);
}

void Tokenizer::encode_plain(std::string_view text, bool after_boundary, std::vector<int32_t>& out) const {
  if (bpe_) {
    bpe_->encode(text, out);
  } else {
    spm_->encode(escape_spaces(text, vocab_.add_space_prefix && after_boundary), out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, const EncodeOptions& options) const {
  // SentencePiece does not distinguish U+2581 from the space it stands for: "▁▁x" is two
  // spaces and x to it (and to Hugging Face), so runs of them must meet the user-defined
  // space-run tokens as spaces do. llama.cpp skips this step and splits such input otherwise.
  std::string respaced;
  if (spm_ && input.find(kVisibleSpace) != std::string_view::npos) respaced = unescape_spaces(input);
  const std::string_view text = respaced.empty() ? input : std::string_view(respaced);

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos.value_or(vocab_.add_bos) && vocab_.bos != kNoToken) out.push_back(vocab_.bos);
  bool after_boundary = true;
  for (size_t pos = 0; pos < text.size();) {
    const auto special = specials_.find(text, pos, options.parse_special);
    const size_t plain_end = special ? special->begin : text.size();
    if (plain_end > pos) {
      encode_plain(text.substr(pos, plain_end - pos), after_boundary, out);
      after_boundary = false;
    }
    if (!special) break;
    out.push_back(special->id);
    after_boundary = true;
    pos = special->begin + special->length;
  }
  if (options.add_eos.value_or(vocab_.add_eos) && vocab_.eos != kNoToken) out.push_back(vocab_.eos);
  return out;
}

void Tokenizer::append_piece(int32_t id, DecodeState& state, std::string& out, const DecodeOptions& options) const {
  check_id(id);
  const TokenType type = vocab_.types[id];
  const bool boundary = type == TokenType::Control || type == TokenType::Unknown || type == TokenType::UserDefined;
  std::string_view p = pieces_[static_cast<size_t>(id)];
  if (vocab_.add_space_prefix && state.after_boundary && !boundary && !p.empty() && p.front() == ' ')
    p.remove_prefix(1);
  if (!boundary || !(options.skip_special && vocab_.is_special(id))) out.append(p);
  state.after_boundary = boundary;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  DecodeState state;
  for (int32_t id : ids) append_piece(id, state, out, options);
  return out;
}

}  // namespace cellm::tokenizer
