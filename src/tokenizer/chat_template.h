#pragma once
// Chat prompts for the families the engine's models use, written in C++ rather than by a
// Jinja interpreter: the GGUF's tokenizer.chat_template text is only read to recognise the
// family (and ChatML's default system prompt). Rendering reproduces what the reference Jinja
// template produces for system/user/assistant messages, with one deliberate difference: the
// BOS token is never written as text. Encode the result with EncodeOptions{.parse_special =
// true} and the file's add-BOS flag, which is how llama.cpp feeds templates to the model.
//
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n ...  <|im_start|>assistant\n
//           (SmolLM2, Qwen 2; a file's template may add a default system turn)
//   gemma   <start_of_turn>{user|model}\n{content}<end_of_turn>\n ... <start_of_turn>model\n
//           (a system message is folded into the first user turn; turns must alternate)
//   llama3  <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::gguf {
class File;
}

namespace cellm::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  enum class Family { ChatML, Gemma, Llama3 };

  // The template for a model file: `override_name` when not empty (see by_name), else the
  // family recognised in tokenizer.chat_template, else - for files without a template - the
  // family inferred from general.architecture or the turn tokens (logged as inferred).
  // Throws Unsupported / NotFound with the known names when nothing fits.
  static ChatTemplate for_model(const gguf::File& file, std::string_view override_name = {});
  // By name (see names()); throws InvalidArgument listing the choices.
  static ChatTemplate by_name(std::string_view name);
  // Recognises the family of a Jinja template text; throws Unsupported listing the choices.
  static ChatTemplate from_jinja(std::string_view jinja);
  static std::vector<std::string> names();

  // Throws InvalidArgument for a role other than system/user/assistant, and for Gemma when
  // user and assistant turns do not alternate starting with the user (as its template does).
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  const std::string& name() const { return name_; }
  Family family() const { return family_; }
  // ChatML: the system turn a file's Jinja template writes when the conversation does not
  // start with one ("" = none). It is written only after use_default_system(true): like
  // llama.cpp's built-in templates, cellm renders just the messages it is given by default
  // (SmolLM2-135M answers plain questions far better without its default system turn).
  const std::string& default_system_prompt() const { return default_system_; }
  void use_default_system(bool on) { use_default_system_ = on; }
  // Text that ends an assistant turn ("<|im_end|>", "<end_of_turn>", "<|eot_id|>").
  std::string_view end_of_turn() const;

 private:
  ChatTemplate(std::string name, Family family, std::string default_system = {})
      : name_(std::move(name)), family_(family), default_system_(std::move(default_system)) {}

  std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  std::string name_;
  Family family_;
  std::string default_system_;
  bool use_default_system_ = false;
};

}  // namespace cellm::tokenizer
