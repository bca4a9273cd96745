// fuzz_chat_template: conversations built from the input rendered with every chat template,
// the input as a Jinja template text, and the rendered prompt encoded as the engine does.
//
// Input: [flags][role][length][content...][role][length][content...]...
//   flags: bit 0 add_generation_prompt, bit 1 use_default_system, bits 2.. pick the tokenizer.
//   role % 4: system, user, assistant, or a role spelled by the next length-prefixed slice.
// The whole input is also handed to ChatTemplate::from_jinja; a family it recognises renders
// the same conversation.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "support/check.h"
#include "support/input.h"
#include "support/tokenizers.h"
#include "tokenizer/chat_template.h"

namespace {

using cellm::fuzz::FuzzInput;
using cellm::fuzz::refused;
using cellm::tokenizer::ChatMessage;
using cellm::tokenizer::ChatTemplate;
using cellm::tokenizer::Tokenizer;

constexpr size_t kMaxMessages = 64;

std::vector<ChatMessage> read_messages(FuzzInput& in) {
  static const char* const kRoles[] = {"system", "user", "assistant"};
  std::vector<ChatMessage> messages;
  while (!in.empty() && messages.size() < kMaxMessages) {
    const uint8_t role = in.byte();
    ChatMessage m;
    m.role = role % 4 < 3 ? std::string(kRoles[role % 4]) : std::string(in.slice(in.byte()));
    m.content = std::string(in.slice(in.byte()));
    messages.push_back(std::move(m));
  }
  return messages;
}

bool known_role(const std::string& role) { return role == "system" || role == "user" || role == "assistant"; }

// Whether a template of `family` must refuse the conversation: an unknown role anywhere, or for
// Gemma, turns after a leading system message where users are not exactly the even turns (the
// reference Jinja's test, which lets a later system message stand in an assistant's place).
bool must_refuse(ChatTemplate::Family family, const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages)
    if (!known_role(m.role)) return true;
  if (family != ChatTemplate::Family::Gemma) return false;
  const size_t first = !messages.empty() && messages[0].role == "system" ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i)
    if ((messages[i].role == "user") != ((i - first) % 2 == 0)) return true;
  return false;
}

// `encoded`: the prompts already encoded for this input (the ChatML names often render alike).
void render_and_encode(const ChatTemplate& chat, const std::vector<ChatMessage>& messages, bool generation_prompt,
                       const Tokenizer& tok, std::set<std::string>& encoded) {
  std::string prompt;
  const bool was_refused = refused([&] { prompt = chat.render(messages, generation_prompt); });
  FUZZ_CHECK(was_refused == must_refuse(chat.family(), messages), "template '", chat.name(), "' with ",
             messages.size(), " messages: refused=", was_refused);
  if (was_refused) return;
  if (chat.family() == ChatTemplate::Family::ChatML)  // ChatML writes contents untrimmed
    for (const ChatMessage& m : messages)
      FUZZ_CHECK(prompt.find(m.content) != std::string::npos, "chatml prompt lacks a message's content");
  if (!encoded.insert(prompt).second) return;
  cellm::fuzz::encode_checked(tok, prompt, true);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cellm::fuzz::fuzz_tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.byte();
  const bool generation_prompt = (flags & 1) != 0;
  const Tokenizer& tok = cellm::fuzz::pick_tokenizer(flags >> 2);
  const std::vector<ChatMessage> messages = read_messages(in);

  std::set<std::string> encoded;
  for (const std::string& name : ChatTemplate::names()) {
    ChatTemplate chat = ChatTemplate::by_name(name);
    chat.use_default_system((flags & 2) != 0);
    render_and_encode(chat, messages, generation_prompt, tok, encoded);
  }
  ChatTemplate from_text = ChatTemplate::by_name("chatml");
  if (!refused([&] { from_text = ChatTemplate::from_jinja(in.whole()); })) {
    from_text.use_default_system((flags & 2) != 0);
    render_and_encode(from_text, messages, generation_prompt, tok, encoded);
  }
  return 0;
}
