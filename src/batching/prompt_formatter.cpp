#include "batching/prompt_formatter.h"

#include "core/error.h"

namespace cellm::batching {

PromptFormatter::PromptFormatter(const Engine& engine, const PromptOptions& options) : engine_(engine), flags_(options) {
  try {
    template_ = tokenizer::ChatTemplate::for_model(engine_.file(), flags_.template_name);
    template_->use_default_system(flags_.default_system);
  } catch (const Error& e) {
    if (!flags_.template_name.empty() || !flags_.raw) throw;  // the template was asked for
    template_error_code_ = e.code();
    template_error_ = e.what();
  }
}

const tokenizer::ChatTemplate& PromptFormatter::chat_template() const {
  if (!template_) throw Error(template_error_code_, template_error_);
  return *template_;
}

std::vector<int32_t> PromptFormatter::prompt(const std::string& text, std::optional<bool> raw,
                                             const std::string* system) const {
  const bool use_raw = raw.value_or(flags_.raw);
  if (use_raw) return engine_.tokenizer().encode(text);  // user text: special-token text stays plain
  std::vector<tokenizer::ChatMessage> messages;
  const std::string& sys = system ? *system : flags_.system;
  if (!sys.empty()) messages.push_back({"system", sys});
  messages.push_back({"user", text});
  return conversation(messages);
}

std::vector<int32_t> PromptFormatter::conversation(const std::vector<tokenizer::ChatMessage>& messages) const {
  const std::string rendered = chat_template().render(messages, /*add_generation_prompt=*/true);
  tokenizer::EncodeOptions options;
  options.parse_special = true;
  return engine_.tokenizer().encode(rendered, options);
}

}  // namespace cellm::batching
