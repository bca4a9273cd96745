// `cellm tokenize`: the token ids and pieces of a text, for checking prompts and templates.
//
//   default   one token per line: the id right-aligned, two spaces, the piece in quotes
//                  2  '<bos>'
//               9259  'Hello'
//   --ids     the ids as one JSON array: [2, 9259, 1902]
//   --pieces  one quoted piece per line
// Pieces are the bytes a token stands for, escaped so that every line is readable: \n \r \t
// \\ \' and \xNN for other control bytes and for bytes that are not whole UTF-8 characters
// (byte-fallback tokens). The token count goes to stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "gguf/file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace cellm::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids_only = false;
  bool pieces_only = false;
  bool special = false;
};

std::string quoted(std::string_view piece) {
  std::string out = "'";
  char hex[8];
  for (size_t i = 0; i < piece.size();) {
    const auto c = static_cast<unsigned char>(piece[i]);
    const size_t n = tokenizer::utf8::sequence_length(piece, i);
    if (n > 1) {
      out.append(piece.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      default:
        if (n == 1 && c >= 0x20 && c != 0x7F) {
          out += static_cast<char>(c);
        } else {
          std::snprintf(hex, sizeof hex, "\\x%02X", c);
          out += hex;
        }
    }
    ++i;
  }
  return out + "'";
}

std::string read_input(const TokenizeFlags& flags) {
  if (flags.file.empty()) return flags.prompt;
  if (flags.file == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(flags.file, std::ios::binary);
  if (!in) fail(ErrorCode::Io, "cannot read '", flags.file, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int tokenize(const TokenizeFlags& flags) {
  const std::string text = read_input(flags);
  const auto file = gguf::File::open(resolve_model_path(flags.model));
  const auto tok = tokenizer::Tokenizer::from_gguf(*file);
  const std::vector<int32_t> ids = tok->encode(text, {.parse_special = flags.special});

  std::string out;
  if (flags.ids_only) {
    out += "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    out += "]\n";
  } else {
    char id[16];
    for (int32_t t : ids) {
      if (!flags.pieces_only) {
        std::snprintf(id, sizeof id, "%6d  ", t);
        out += id;
      }
      out += quoted(tok->piece(t)) + "\n";
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fprintf(stderr, "%zu tokens, %zu bytes of text%s\n", ids.size(), text.size(),
               tok->adds_bos() ? " (BOS added, as the model asks)" : "");
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, CommandAction& action) {
  auto flags = std::make_shared<TokenizeFlags>();
  auto* cmd = app.add_subcommand("tokenize", "Show the token ids and pieces of a text");
  cmd->add_option("-m,--model", flags->model, "GGUF model (default: the default model in models/)");
  auto* input = cmd->add_option_group("input", "the text to tokenize (one of)");
  input->add_option("-p,--prompt", flags->prompt, "Text to tokenize");
  input->add_option("-f,--file", flags->file, "File whose bytes to tokenize ('-' for stdin)");
  input->require_option(1);
  auto* ids = cmd->add_flag("--ids", flags->ids_only, "Print only the ids, as a JSON array");
  auto* pieces = cmd->add_flag("--pieces", flags->pieces_only, "Print only the pieces, one per line");
  ids->excludes(pieces);
  cmd->add_flag("--special", flags->special,
                "Parse special-token text such as <|im_start|> in the input (default: plain text)");
  cmd->callback([flags, &action] { action = [flags] { return tokenize(*flags); }; });
}

}  // namespace cellm::cli
