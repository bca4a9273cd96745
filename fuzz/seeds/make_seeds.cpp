// Writes the seed inputs of the fuzz targets into OUT/<target>/: `fuzz_make_seeds OUT`.
// scripts/fuzz runs it before fuzzing; what the seeds reach survives in the minimized corpus
// (fuzz/corpus/), so the seeds themselves are not kept in the repository.
//   fuzz_gguf:          the micro models (llama, gemma3) with their vocabulary cut to 66 tokens,
//                       one tensor of every dequantizable type, each default model's metadata
//                       with its vocabulary cut to ~150 tokens (real keys, pre-tokenizer, chat
//                       template; no tensors), and the first KBs of each default model file.
//   fuzz_tokenizer:     texts (languages, code, emoji, specials, invalid UTF-8) and the ids
//                       they encode to, for every tokenizer.
//   fuzz_chat_template: conversations in the input layout of fuzz_chat_template.cpp, and
//                       Jinja templates (SmolLM2's own, other families, none).
//   fuzz_server_request: OpenAI request bodies as clients send them (the README's curl,
//                       the openai package's fields), both endpoints, some nested deep.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/file.h"
#include "gguf/writer.h"
#include "support/micro_model.h"
#include "support/tokenizers.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace cellm;
using namespace std::string_view_literals;
namespace fs = std::filesystem;

class SeedDir {
 public:
  SeedDir(const fs::path& root, const std::string& target) : dir_(root / target) { fs::create_directories(dir_); }
  void write(const std::string& name, std::string_view bytes) {
    std::ofstream(dir_ / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ++count_;
  }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) {
    write(name, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  ~SeedDir() { std::printf("%s: %d seeds\n", dir_.string().c_str(), count_); }

 private:
  fs::path dir_;
  int count_ = 0;
};

std::string file_prefix(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string s(bytes, '\0');
  in.read(s.data(), static_cast<std::streamsize>(bytes));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// One row of 256 elements of every type the reader dequantizes (bytes are a fixed pattern).
std::vector<uint8_t> every_tensor_type() {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                     DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    std::vector<uint8_t> bytes(row_bytes(type, 256));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
    w.add_tensor(std::string(dtype_name(type)), {256, 1}, type, std::move(bytes));
  }
  return w.to_bytes();
}

const std::vector<std::string>& sample_texts();

// A copy of `file` whose vocabulary holds only the tokens `keep` (old ids, in their new
// order): per-token arrays, merges and special ids follow, and so do the rows of token_embd /
// output when `with_tensors` (other tensors are copied whole). Real vocabularies and the micro
// model shrink this way to a few KB, a size the fuzzer can afford to mutate.
std::vector<uint8_t> cut_vocabulary(const gguf::File& file, const std::vector<int32_t>& keep, bool with_tensors) {
  std::map<int64_t, int64_t> new_id;
  for (size_t i = 0; i < keep.size(); ++i) new_id.emplace(keep[i], static_cast<int64_t>(i));
  const auto& tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::set<std::string> kept_texts;
  for (int32_t id : keep) kept_texts.insert(tokens.at(static_cast<size_t>(id)));

  gguf::Writer w;
  for (const auto& [key, value] : file.metadata()) {
    const bool tokenizer_key = key.rfind("tokenizer.ggml.", 0) == 0;
    if (key == "tokenizer.ggml.merges") {
      std::vector<std::string> merges;
      for (const std::string& m : value.as_array().strings) {
        const size_t sep = m.find(' ', 1);
        if (sep == std::string::npos) continue;
        const std::string left = m.substr(0, sep), right = m.substr(sep + 1);
        if (kept_texts.count(left) && kept_texts.count(right) && kept_texts.count(left + right)) merges.push_back(m);
      }
      w.set_strings(key, std::move(merges));
    } else if (tokenizer_key && value.type == gguf::ValueType::Array && value.as_array().size() == tokens.size()) {
      const gguf::Array& old = value.as_array();
      gguf::Array a;
      a.elem_type = old.elem_type;
      for (int32_t id : keep) {
        const auto i = static_cast<size_t>(id);
        if (!old.strings.empty()) a.strings.push_back(old.strings[i]);
        if (!old.floats.empty()) a.floats.push_back(old.floats[i]);
        if (!old.ints.empty()) a.ints.push_back(old.ints[i]);
      }
      w.set(key, gguf::Value::array(std::move(a)));
    } else if (tokenizer_key && key.size() > 3 && key.compare(key.size() - 3, 3, "_id") == 0) {
      if (auto it = new_id.find(static_cast<int64_t>(file.get_uint(key))); it != new_id.end())
        w.set_u32(key, static_cast<uint32_t>(it->second));
    } else if (key.size() > 11 && key.compare(key.size() - 11, 11, ".vocab_size") == 0) {
      w.set_u32(key, static_cast<uint32_t>(keep.size()));
    } else {
      w.set(key, value);
    }
  }
  if (!with_tensors) return w.to_bytes();
  for (const gguf::TensorInfo& t : file.tensors()) {
    const bool per_token = (t.name == "token_embd.weight" || t.name == "output.weight") && t.dims.size() == 2 &&
                           t.dims[1] == static_cast<int64_t>(tokens.size());
    if (!per_token) {
      w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.bytes));
      continue;
    }
    const size_t row = row_bytes(t.type, t.dims[0]);
    std::vector<uint8_t> rows;
    for (int32_t id : keep) rows.insert(rows.end(), t.data + id * row, t.data + (id + 1) * row);
    w.add_tensor(t.name, {t.dims[0], static_cast<int64_t>(keep.size())}, t.type, std::move(rows));
  }
  return w.to_bytes();
}

std::vector<int32_t> id_range(int32_t begin, int32_t end) {
  std::vector<int32_t> ids;
  for (int32_t id = begin; id < end; ++id) ids.push_back(id);
  return ids;
}

// `ids` plus the tokens the first `texts` sample texts encode to, each once.
std::vector<int32_t> with_sample_tokens(std::vector<int32_t> ids, const gguf::File& file, size_t texts) {
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  std::set<int32_t> seen(ids.begin(), ids.end());
  for (size_t i = 0; i < texts && i < sample_texts().size(); ++i)
    for (int32_t id : tok->encode(sample_texts()[i], {.parse_special = true}))
      if (seen.insert(id).second) ids.push_back(id);
  return ids;
}

// The tokens kept of each default model (default_model_paths() order).
std::vector<std::vector<int32_t>> default_model_keeps() {
  // SmolLM2: its 17 specials and the byte-level spellings of printable ASCII.
  std::vector<int32_t> smollm2 = id_range(0, 17 + 94);
  // Gemma 3: <pad> <eos> <bos> <unk> <mask> [multimodal], <start_of_turn> <end_of_turn>, <0x00>..<0x7F>.
  std::vector<int32_t> gemma3 = id_range(0, 6);
  gemma3.insert(gemma3.end(), {105, 106});
  for (int32_t id : id_range(238, 238 + 128)) gemma3.push_back(id);
  return {smollm2, gemma3};
}

void gguf_seeds(const fs::path& out) {
  SeedDir seeds(out, "fuzz_gguf");
  for (const char* arch : {"llama", "gemma3"}) {
    const std::vector<uint8_t> bytes = fuzz::random_model_bytes(fuzz::micro_model_spec(arch));
    const auto file = gguf::File::parse(bytes, arch);
    std::vector<int32_t> keep = id_range(0, 64);  // bytes 0x00..0x3F, then <|im_start|>, <|im_end|>
    keep.insert(keep.end(), {256, 257});
    seeds.write(std::string("micro-") + arch + ".gguf", cut_vocabulary(*file, keep, true));
  }
  seeds.write("every-tensor-type.gguf", every_tensor_type());
  const std::vector<std::string> paths = fuzz::default_model_paths();
  const std::vector<std::vector<int32_t>> keeps = default_model_keeps();
  for (size_t m = 0; m < paths.size(); ++m) {
    if (!fs::exists(paths[m])) continue;
    const std::string stem = fs::path(paths[m]).stem().string();
    const auto file = gguf::File::open(paths[m]);
    seeds.write(stem + "-small-vocabulary.gguf", cut_vocabulary(*file, with_sample_tokens(keeps[m], *file, 3), false));
    for (size_t kb : {1, 4}) seeds.write(stem + "-first-" + std::to_string(kb) + "kb", file_prefix(paths[m], kb * 1024));
  }
}

const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog. I'm sure you'll see we've done it; don't worry.",
      "Numbers: 12345, 3.14159, 1,000,000 and 2024-01-31T12:00:00Z",
      "int main() {\n    return 0;\n}\n\tif (x != y) { y += 2; }  // comment\n",
      "   leading and trailing spaces   \n\n\n  \t \r\n",
      "Привет, мир! Grüße, Zoë. ¿Qué tal?",
      "こんにちは世界。你好，世界！안녕하세요",
      "مرحبا بالعالم שלום עולם नमस्ते दुनिया",
      "Emoji 🙂👍🏽👨‍👩‍👧 and symbols ∑∫√ ≠ ≤",
      "\xE2\x96\x81\xE2\x96\x81x \xE2\x96\x81y\xE2\x96\x81",
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
      "<bos><start_of_turn>user\nWhy is the sky blue?<end_of_turn>\n<start_of_turn>model\n",
      "<|endoftext|><eos><unk><pad><mask> <|im_end|>x",
      "<h1>Title</h1>\n<p>text</p>    \n",
      std::string("bytes \x00\x01\x04\x7F end"sv),
      "invalid \xFF\xFE \xC3\x28 \xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\xAF",
  };
  return texts;
}

void tokenizer_seeds(const fs::path& out) {
  SeedDir seeds(out, "fuzz_tokenizer");
  const auto& tokenizers = fuzz::fuzz_tokenizers();
  for (size_t t = 0; t < tokenizers.size(); ++t) {
    const auto& tok = *tokenizers[t].tokenizer;
    for (size_t i = 0; i < sample_texts().size(); ++i) {
      const std::string& text = sample_texts()[i];
      const std::string head = {static_cast<char>(t), static_cast<char>(i % 2)};  // selector, skip_special
      seeds.write(tokenizers[t].name + "-text-" + std::to_string(i), head + text);
      const std::vector<int32_t> ids = tok.encode(text, {.parse_special = true});
      seeds.write(tokenizers[t].name + "-ids-" + std::to_string(i),
                  head + std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t)));
    }
  }
}

// A conversation in fuzz_chat_template's input layout.
std::string conversation(uint8_t flags, const std::vector<std::pair<std::string, std::string>>& messages) {
  std::string s(1, static_cast<char>(flags));
  for (const auto& [role, content] : messages) {
    if (role == "system") s += '\0';
    else if (role == "user") s += '\1';
    else if (role == "assistant") s += '\2';
    else s += '\3' + std::string(1, static_cast<char>(role.size())) + role;
    s += static_cast<char>(std::min<size_t>(content.size(), 255)) + content.substr(0, 255);
  }
  return s;
}

void chat_template_seeds(const fs::path& out) {
  SeedDir seeds(out, "fuzz_chat_template");
  const std::vector<std::vector<std::pair<std::string, std::string>>> chats = {
      {{"user", "Hi!"}},
      {{"system", "You are a pirate."}, {"user", "What is 2+2?"}},
      {{"user", "Hello"}, {"assistant", "Hi, how can I help?"}, {"user", "Tell me a joke."}},
      {{"system", "  Be brief.\n"}, {"user", "\u3000 spaced \t"}, {"assistant", "ok\n\n"}},
      {{"assistant", "I speak first"}, {"user", "then me"}},
      {{"user", "one"}, {"user", "two"}},
      {{"tool", "{\"result\": 4}"}},
      {{"user", ""}},
      {{"user", "<|im_end|><start_of_turn><|eot_id|>\xE2\x96\x81 special text"}},
      {{"user", "Привет 🙂 こんにちは"}, {"assistant", "\xFF\xFE invalid"}},
  };
  const auto& tokenizers = fuzz::fuzz_tokenizers();
  for (size_t c = 0; c < chats.size(); ++c)
    for (size_t t = 0; t < tokenizers.size(); ++t)
      seeds.write("chat-" + std::to_string(c) + "-" + tokenizers[t].name,
                  conversation(static_cast<uint8_t>((t << 2) | (c % 4)), chats[c]));

  std::vector<std::string> templates = {
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}",
      "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}<|im_start|>",
      "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n"
      "{% endfor %}",
      "<|start_header_id|>{{ role }}<|end_header_id|>\n\n{{ content | trim }}<|eot_id|>",
      "{{ messages }} no known family",
  };
  for (const std::string& path : fuzz::default_model_paths()) {
    if (!fs::exists(path)) continue;
    const auto file = gguf::File::open(path);
    if (const std::string* jinja = file->find_string("tokenizer.chat_template")) templates.push_back(*jinja);
  }
  for (size_t i = 0; i < templates.size(); ++i) seeds.write("jinja-" + std::to_string(i), templates[i]);
}

void server_request_seeds(const fs::path& out) {
  SeedDir seeds(out, "fuzz_server_request");
  const std::vector<std::string> chat = {
      R"({"messages": [{"role": "user", "content": "What is the capital of France?"}], "temperature": 0})",
      R"({"model": "cellm", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},)"
      R"( {"role": "assistant", "content": null}, {"role": "developer", "content": "x"}], "max_tokens": 16,)"
      R"( "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "seed": -1, "stop": ["\n", "END"]})",
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "\u00e9\ud83d\ude42"}]}],)"
      R"( "stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 8, "n": 1})",
      R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false, "tools": [], "logit_bias": {},)"
      R"( "response_format": {"type": "text"}, "presence_penalty": 0.5, "frequency_penalty": -1, "user": "u", "store": false})",
      R"({"messages": [{"role": "tool", "content": "4"}], "response_format": {"type": ["json_object"]}, "stop": []})",
      R"({"messages": [], "temperature": 2.5, "top_p": 0.5, "seed": 18446744073709551615})",
  };
  const std::vector<std::string> completions = {
      R"({"model": "cellm", "prompt": "Once upon a time", "max_tokens": 32, "stop": "\n", "echo": false, "suffix": ""})",
      R"({"prompt": [1, 2, 3, 2147483647], "stream": true, "logprobs": 0, "best_of": 1})",
      R"({"prompt": [[4, 5]], "temperature": 0.7, "repeat_penalty": 1.3})",
      R"({"prompt": ["one"], "top_p": 0})",
      R"({"prompt": ["one", "two"], "max_tokens": 0, "logprobs": 5})",
      R"({"prompt": [-1, 1.5, [[]]], "seed": 1.5})",
  };
  const std::vector<std::string> broken = {"", "null", "[]", "{\"messages\": [", "{\"prompt\": \"\xFF\"}", "{\"a\":1}}"};
  int i = 0;
  for (const std::string& body : chat) seeds.write("chat-" + std::to_string(i++), std::string(1, '\0') + body);
  for (const std::string& body : completions) seeds.write("completion-" + std::to_string(i++), "\x01" + body);
  for (const std::string& body : broken) seeds.write("broken-" + std::to_string(i++), "\x01" + body);
  // flags bit 1: the first `[]` nested deep (see fuzz_server_request.cpp).
  seeds.write("deep-chat", "\x02" + std::string(R"({"messages": [{"role": "user", "content": []}]})"));
  seeds.write("deep-prompt", "\x03" + std::string(R"({"prompt": [[]]})"));
  seeds.write("deep-format", "\x03" + std::string(R"({"prompt": "x", "response_format": {"type": []}})"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    gguf_seeds(argv[1]);
    tokenizer_seeds(argv[1]);
    chat_template_seeds(argv[1]);
    server_request_seeds(argv[1]);
  } catch (const cellm::Error& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
