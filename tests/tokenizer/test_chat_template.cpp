#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_models.h"
#include "core/error.h"
#include "corpus.h"
#include "gguf/file.h"
#include "synthetic_vocab.h"

namespace cellm::tokenizer {
namespace {

using Messages = std::vector<ChatMessage>;

template <typename F>
ErrorCode error_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "expected an error";
  return ErrorCode::Internal;
}

// SmolLM2's own template (tokenizer.chat_template), rendered by transformers' Jinja for the
// cases of chat_smollm2.jsonl: the C++ rendering must be byte-identical.
TEST(ChatTemplate, SmolLM2MatchesItsJinjaTemplate) {
  CELLM_REQUIRE_MODEL(path, test::kSmolLM2);
  const auto file = gguf::File::open(path);
  ChatTemplate tmpl = ChatTemplate::for_model(*file);
  EXPECT_EQ(tmpl.name(), "smollm2");
  EXPECT_EQ(tmpl.default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  // Off by default: only the given messages are rendered.
  EXPECT_EQ(tmpl.render(Messages{{"user", "Hi!"}}, true), "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  tmpl.use_default_system(true);  // what the Jinja template does
  std::ifstream in(test::tokenizer_data_path("chat_smollm2.jsonl"));
  ASSERT_TRUE(in);
  size_t cases = 0;
  for (std::string line; std::getline(in, line); ++cases) {
    const auto j = nlohmann::json::parse(line);
    Messages messages;
    for (const auto& m : j["messages"]) messages.push_back({m["role"], m["content"]});
    EXPECT_EQ(tmpl.render(messages, j["add_generation_prompt"]), j["text"].get<std::string>()) << line;
  }
  EXPECT_GE(cases, 8u);
}

TEST(ChatTemplate, GemmaIsInferredForAFileWithoutTemplate) {
  CELLM_REQUIRE_MODEL(path, test::kGemma3);
  const auto file = gguf::File::open(path);
  EXPECT_FALSE(file->has("tokenizer.chat_template"));
  EXPECT_EQ(ChatTemplate::for_model(*file).name(), "gemma");
  EXPECT_EQ(ChatTemplate::for_model(*file, "chatml").name(), "chatml");  // --chat-template wins
}

TEST(ChatTemplate, GemmaFoldsTheSystemMessageIntoTheFirstUserTurn) {
  const ChatTemplate g = ChatTemplate::by_name("gemma");
  EXPECT_EQ(g.render(Messages{{"user", "Hi!"}}, true),
            "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(g.render(Messages{{"system", "Be brief. "}, {"user", "  What?\n"}, {"assistant", "This."}}, false),
            "<start_of_turn>user\nBe brief. \n\nWhat?<end_of_turn>\n<start_of_turn>model\nThis.<end_of_turn>\n");
  EXPECT_EQ(g.render(Messages{{"user", "\u3000x\u00a0"}}, false), "<start_of_turn>user\nx<end_of_turn>\n");
  EXPECT_EQ(g.end_of_turn(), "<end_of_turn>");
}

TEST(ChatTemplate, GemmaRequiresAlternatingTurns) {
  const ChatTemplate g = ChatTemplate::by_name("gemma");
  EXPECT_EQ(error_of([&] { g.render(Messages{{"assistant", "first"}}, true); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(error_of([&] { g.render(Messages{{"user", "a"}, {"user", "b"}}, true); }), ErrorCode::InvalidArgument);
}

TEST(ChatTemplate, Llama3HeadersTrimContent) {
  const ChatTemplate l = ChatTemplate::by_name("llama3");
  EXPECT_EQ(l.render(Messages{{"system", "S"}, {"user", " U \n"}}, true),
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, DefaultSystemTurnOnlyWhenAskedFor) {
  EXPECT_EQ(ChatTemplate::by_name("chatml").render(Messages{{"user", " x "}}, true),
            "<|im_start|>user\n x <|im_end|>\n<|im_start|>assistant\n");
  ChatTemplate qwen2 = ChatTemplate::by_name("qwen2");
  EXPECT_EQ(qwen2.render(Messages{{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");
  qwen2.use_default_system(true);
  EXPECT_EQ(qwen2.render(Messages{{"user", "x"}}, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, RecognisesFamiliesFromJinjaText) {
  const ChatTemplate custom = ChatTemplate::from_jinja(
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nBe kind.<|im_end|>\\n' }}{% endif %}"
      "{{ '<|im_start|>' + message['role'] + '\\n' }}");
  EXPECT_EQ(custom.name(), "chatml");
  EXPECT_EQ(custom.default_system_prompt(), "Be kind.");
  EXPECT_EQ(ChatTemplate::from_jinja("{{ bos_token }}<start_of_turn>").name(), "gemma");
  EXPECT_EQ(ChatTemplate::from_jinja("<|start_header_id|>").name(), "llama3");
}

TEST(ChatTemplate, UnknownNamesAndTemplatesListTheChoices) {
  std::string message;
  EXPECT_EQ(error_of([] { ChatTemplate::by_name("vicuna"); }, &message), ErrorCode::InvalidArgument);
  for (const auto& name : ChatTemplate::names()) EXPECT_NE(message.find(name), std::string::npos) << message;
  EXPECT_EQ(error_of([] { ChatTemplate::from_jinja("{{ messages }}"); }, &message), ErrorCode::Unsupported);
  EXPECT_NE(message.find("--chat-template"), std::string::npos);
  EXPECT_NE(message.find("gemma"), std::string::npos);
}

TEST(ChatTemplate, FileWithoutTemplateOrTurnTokensIsAnError) {
  const auto t = test::make_tokenizer([](gguf::Writer& w) {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_strings("tokenizer.ggml.tokens", test::byte_level_tokens());
    w.set_strings("tokenizer.ggml.merges", {});
  });
  std::string message;
  EXPECT_EQ(error_of([&] { ChatTemplate::for_model(*t.file); }, &message), ErrorCode::NotFound);
  EXPECT_NE(message.find("llama3"), std::string::npos);
}

TEST(ChatTemplate, UnknownRoleIsRefused) {
  EXPECT_EQ(error_of([] { ChatTemplate::by_name("chatml").render(Messages{{"tool", "x"}}, true); }),
            ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace cellm::tokenizer
