#include "tokenizer/chat_template.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "gguf/file.h"
#include "tokenizer/utf8.h"

namespace cellm::tokenizer {
namespace {

constexpr std::string_view kSmolLM2System = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
constexpr std::string_view kQwen2System = "You are a helpful assistant.";

std::string known_names() {
  std::string s;
  for (const auto& n : ChatTemplate::names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Python's str.isspace, which Jinja's `trim` filter strips.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string trim(std::string_view s) {
  size_t begin = 0, end = s.size();
  // Leading: walk forward over whitespace characters.
  while (begin < end) {
    const size_t n = utf8::sequence_length(s, begin);
    if (n == 0 || !is_python_space(utf8::decode_at(s, begin, n))) break;
    begin += n;
  }
  // Trailing: find the start of the last character by skipping continuation bytes.
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const size_t n = utf8::sequence_length(s, start);
    if (n != end - start || !is_python_space(utf8::decode_at(s, start, n))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

void check_roles(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      fail(ErrorCode::InvalidArgument, "chat message ", i, " has role '", r, "'; expected system, user or assistant");
  }
}

// A Jinja string literal's text, or nullopt when `s` is not plain literal text.
std::optional<std::string> literal_text(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"' || c == '{' || c == '}') return std::nullopt;
    if (c == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      continue;
    }
    out += c;
  }
  return out;
}

// ChatML templates that open with a fixed system turn when the conversation has none
// (SmolLM2, Qwen 2) spell it as one literal: "<|im_start|>system\n...<|im_end|>".
std::string chatml_default_system(std::string_view jinja) {
  constexpr std::string_view open = "<|im_start|>system";
  for (size_t at = jinja.find(open); at != std::string_view::npos; at = jinja.find(open, at + 1)) {
    size_t body = at + open.size();
    if (jinja.compare(body, 1, "\n") == 0) body += 1;
    else if (jinja.compare(body, 2, "\\n") == 0) body += 2;
    else continue;
    const size_t close = jinja.find("<|im_end|>", body);
    if (close == std::string_view::npos) continue;
    if (auto text = literal_text(jinja.substr(body, close - body)); text && !text->empty()) return *text;
  }
  return {};
}

bool vocab_has(const gguf::File& file, std::string_view token) {
  if (!file.has("tokenizer.ggml.tokens")) return false;
  const auto& tokens = file.get_string_array("tokenizer.ggml.tokens");
  return std::find(tokens.begin(), tokens.end(), token) != tokens.end();
}

}  // namespace

std::vector<std::string> ChatTemplate::names() { return {"chatml", "gemma", "llama3", "qwen2", "smollm2"}; }

ChatTemplate ChatTemplate::by_name(std::string_view name) {
  if (name == "chatml") return {"chatml", Family::ChatML};
  if (name == "smollm2") return {"smollm2", Family::ChatML, std::string(kSmolLM2System)};
  if (name == "qwen2") return {"qwen2", Family::ChatML, std::string(kQwen2System)};
  if (name == "gemma") return {"gemma", Family::Gemma};
  if (name == "llama3") return {"llama3", Family::Llama3};
  fail(ErrorCode::InvalidArgument, "unknown chat template '", name, "'; choose one of: ", known_names());
}

ChatTemplate ChatTemplate::from_jinja(std::string_view jinja) {
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    std::string system = chatml_default_system(jinja);
    if (system == kSmolLM2System) return by_name("smollm2");
    if (system == kQwen2System) return by_name("qwen2");
    return {"chatml", Family::ChatML, std::move(system)};
  }
  if (jinja.find("<start_of_turn>") != std::string_view::npos) return by_name("gemma");
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return by_name("llama3");
  fail(ErrorCode::Unsupported, "the model's chat template (tokenizer.chat_template) is not one cellm knows; pass "
       "--chat-template NAME with one of: ", known_names());
}

ChatTemplate ChatTemplate::for_model(const gguf::File& file, std::string_view override_name) {
  if (!override_name.empty()) return by_name(override_name);
  if (const std::string* jinja = file.find_string("tokenizer.chat_template")) return from_jinja(*jinja);

  const std::string* arch = file.find_string("general.architecture");
  const char* inferred = nullptr;
  std::string reason;
  if (arch && arch->rfind("gemma", 0) == 0) {
    inferred = "gemma";
    reason = "general.architecture = " + *arch;
  } else if (vocab_has(file, "<start_of_turn>") && vocab_has(file, "<end_of_turn>")) {
    inferred = "gemma";
    reason = "its <start_of_turn>/<end_of_turn> tokens";
  } else if (vocab_has(file, "<|im_start|>") && vocab_has(file, "<|im_end|>")) {
    inferred = "chatml";
    reason = "its <|im_start|>/<|im_end|> tokens";
  } else if (vocab_has(file, "<|start_header_id|>")) {
    inferred = "llama3";
    reason = "its <|start_header_id|> token";
  }
  if (!inferred)
    fail(ErrorCode::NotFound, "GGUF '", file.name(), "' has no tokenizer.chat_template and its chat format could not "
         "be inferred; pass --chat-template NAME with one of: ", known_names());
  log_info("chat template: '", file.name(), "' has no tokenizer.chat_template; inferred '", inferred, "' from ",
           reason);
  return by_name(inferred);
}

std::string_view ChatTemplate::end_of_turn() const {
  switch (family_) {
    case Family::ChatML: return "<|im_end|>";
    case Family::Gemma: return "<end_of_turn>";
    case Family::Llama3: return "<|eot_id|>";
  }
  return {};
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  check_roles(messages);
  switch (family_) {
    case Family::ChatML: return render_chatml(messages, add_generation_prompt);
    case Family::Gemma: return render_gemma(messages, add_generation_prompt);
    case Family::Llama3: return render_llama3(messages, add_generation_prompt);
  }
  return {};
}

// Contents are written as given (the ChatML templates do not trim).
std::string ChatTemplate::render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  if (use_default_system_ && !default_system_.empty() && !messages.empty() && messages[0].role != "system")
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Gemma has no system turn: the system text (untrimmed) plus a blank line opens the first turn.
std::string ChatTemplate::render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string first_prefix;
  std::span<const ChatMessage> turns = messages;
  if (!messages.empty() && messages[0].role == "system") {
    first_prefix = messages[0].content + "\n\n";
    turns = messages.subspan(1);
  }
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string& role = turns[i].role;
    if ((role == "user") != (i % 2 == 0))
      fail(ErrorCode::InvalidArgument, "gemma chat template: conversation roles must alternate "
           "user/assistant/user/... (turn ", i, " is '", role, "')");
    out += "<start_of_turn>" + (role == "assistant" ? std::string("model") : role) + "\n";
    if (i == 0) out += first_prefix;
    out += trim(turns[i].content) + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (const auto& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace cellm::tokenizer
