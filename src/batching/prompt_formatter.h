#pragma once
// How front ends turn user text into prompt tokens: through the model's chat template (the
// default, with an optional system message), or raw.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batching/engine.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace cellm::batching {

struct PromptOptions {
  bool raw = false;             // the text as is (BOS added if the model wants it)
  std::string system;           // system message for the chat template
  std::string template_name;    // a chat template to use instead of the model's
  bool default_system = false;  // the template's own system turn when none is given
};

class PromptFormatter {
 public:
  // Picks the chat template once. A model with none that fits can still format raw prompts;
  // a templated prompt then throws the reason. Safe to share between threads.
  PromptFormatter(const Engine& engine, const PromptOptions& options);

  // One user turn (after the system message, if any) with the generation prompt, or the raw
  // text; `raw` overrides the flags for this prompt.
  std::vector<int32_t> prompt(const std::string& text, std::optional<bool> raw = std::nullopt,
                              const std::string* system = nullptr) const;
  // A whole conversation with the generation prompt appended.
  std::vector<int32_t> conversation(const std::vector<tokenizer::ChatMessage>& messages) const;

 private:
  const Engine& engine_;
  PromptOptions flags_;
  const tokenizer::ChatTemplate& chat_template() const;
  std::optional<tokenizer::ChatTemplate> template_;
  ErrorCode template_error_code_ = ErrorCode::NotFound;
  std::string template_error_;
};

}  // namespace cellm::batching
