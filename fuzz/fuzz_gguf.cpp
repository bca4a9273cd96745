// fuzz_gguf: any bytes as a GGUF file, then what a loader does with a file that parses: the
// header's fields, every metadata value (and an absent key) through every typed getter, every
// tensor found by name and its data touched (first row dequantized), the model config, the tokenizer (encoding a fixed text, the input's tail and
// a conversation rendered by the file's chat template), and the decode and prefill programs.
// Refusals must be cellm::Errors; reads must stay inside the input (AddressSanitizer sees the
// input's exact extent).
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/log.h"
#include "gguf/dequantize.h"
#include "gguf/file.h"
#include "model/config.h"
#include "model/decoder_program.h"
#include "support/check.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {

using cellm::fuzz::refused;
namespace gguf = cellm::gguf;
namespace model = cellm::model;
namespace tokenizer = cellm::tokenizer;

// Dequantizing a row longer than this teaches the fuzzer nothing new and costs time.
constexpr int64_t kMaxDequantizedRow = 1 << 14;

// Every typed getter on `key`: a value of another type is refused, never misread.
void read_value(const gguf::File& file, const std::string& key) {
  refused([&] { file.get_uint(key); });
  refused([&] { file.get_uint_or(key); });
  refused([&] { file.get_int(key); });
  refused([&] { file.get_float(key); });
  refused([&] { file.get_float_or(key); });
  refused([&] { file.get_bool(key); });
  refused([&] { file.get_bool_or(key); });
  refused([&] { file.get_string(key); });
  refused([&] { file.find_string(key); });
  refused([&] { file.get_array(key); });
  refused([&] { file.get_string_array(key); });
  refused([&] { file.get_float_array(key); });
  refused([&] { file.get_int_array(key); });
}

void read_metadata(const gguf::File& file, std::span<const uint8_t> bytes) {
  FUZZ_CHECK(file.file_size() == bytes.size(), "file_size() ", file.file_size(), " of ", bytes.size(), " bytes");
  FUZZ_CHECK(file.version() == 2 || file.version() == 3, "version ", file.version());
  FUZZ_CHECK(file.alignment() > 0 && (file.alignment() & (file.alignment() - 1)) == 0, "alignment ", file.alignment());
  // Without tensors there is no data section, and its aligned start may lie past the end.
  FUZZ_CHECK(file.tensors().empty() || file.data_offset() <= file.file_size(), "data_offset() ", file.data_offset());
  for (const auto& entry : file.metadata()) {
    const std::string& key = entry.first;  // not a structured binding: clang 14 cannot capture those
    FUZZ_CHECK(file.find(key) == &entry.second && file.has(key), "find('", key, "') is not the listed value");
    read_value(file, key);
  }
  // An absent key: the _or getters give nothing, the others refuse.
  const std::string absent = "fuzz.absent.key";
  if (file.has(absent)) return;
  FUZZ_CHECK(!file.get_uint_or(absent) && !file.get_float_or(absent) && !file.get_bool_or(absent) &&
                 file.find_string(absent) == nullptr,
             "an absent key reads as present");
  read_value(file, absent);
}

void read_tensors(const gguf::File& file, std::span<const uint8_t> bytes) {
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    FUZZ_CHECK(file.find_tensor(t.name) == &t && &file.tensor(t.name) == &t, "find_tensor('", t.name,
               "') is not the listed tensor");
    const int64_t elements = t.elements();
    FUZZ_CHECK(elements > 0 && t.rows() > 0, "tensor '", t.name, "' has ", elements, " elements");
    FUZZ_CHECK(t.bytes == cellm::row_bytes(t.type, t.dims[0]) * static_cast<uint64_t>(t.rows()), "tensor '", t.name,
               "' has ", t.bytes, " bytes");
    const auto start = reinterpret_cast<uintptr_t>(t.data), begin = reinterpret_cast<uintptr_t>(bytes.data());
    FUZZ_CHECK(start >= begin && start - begin <= bytes.size() && t.bytes <= bytes.size() - (start - begin),
               "tensor '", t.name, "' lies outside the input");
    total += t.bytes;
    if (!gguf::can_dequantize(t.type) || t.dims[0] > kMaxDequantizedRow) continue;
    std::vector<float> row(static_cast<size_t>(t.dims[0]));
    gguf::dequantize_row(t.type, t.data, row.data(), t.dims[0]);
  }
  FUZZ_CHECK(total == file.tensor_bytes(), "tensor_bytes() ", file.tensor_bytes(), " != ", total);
  if (file.find_tensor("fuzz.absent.tensor") == nullptr)
    FUZZ_CHECK(refused([&] { file.tensor("fuzz.absent.tensor"); }), "tensor() of an absent name is not refused");
}

// Whatever the vocabulary, encoding gives ids inside it, and streaming them gives decode's text.
// (decode(encode(s)) == s needs a sane vocabulary: fuzz_tokenizer checks it on real ones.)
void use_tokenizer(const tokenizer::Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text, {.parse_special = true});
  for (int32_t id : ids)
    FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < tok.vocab_size(), "encode produced id ", id);
  tokenizer::StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  FUZZ_CHECK(streamed == tok.decode(ids), "streamed text differs from decode's");
}

void load_tokenizer(const gguf::File& file, std::span<const uint8_t> bytes) {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (refused([&] { tok = tokenizer::Tokenizer::from_gguf(file); })) return;
  use_tokenizer(*tok, "Hello, world! <|im_start|>user\n\xE2\x96\x81x<end_of_turn>\n\xF0\x9F\x99\x82");
  const size_t tail = std::min<size_t>(bytes.size(), 64);  // varied text: the input's last bytes
  use_tokenizer(*tok, std::string_view(reinterpret_cast<const char*>(bytes.data() + bytes.size() - tail), tail));

  tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::by_name("chatml");
  if (refused([&] { chat = tokenizer::ChatTemplate::for_model(file); })) return;
  const tokenizer::ChatMessage conversation[] = {{"system", "Be brief."}, {"user", "Hi"}};
  use_tokenizer(*tok, chat.render(conversation, true));
}

void build_programs(const gguf::File& file) {
  model::ModelConfig config;
  if (refused([&] { config = model::read_model_config(file); })) return;
  refused([&] { model::build_decoder_program(file, config, model::Method::Decode, 2); });
  refused([&] { model::build_decoder_program(file, config, model::Method::Prefill, 16); });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cellm::set_log_level(cellm::LogLevel::Error);  // "inferred chat template" on every input is noise
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  std::unique_ptr<gguf::File> file;
  if (refused([&] { file = gguf::File::parse(bytes, "fuzz input"); })) return 0;
  read_metadata(*file, bytes);
  read_tensors(*file, bytes);
  load_tokenizer(*file, bytes);
  build_programs(*file);
  return 0;
}
