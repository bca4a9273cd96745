// Replays fuzz inputs through a fuzz target without libFuzzer, so a default (gcc) build checks
// the minimized corpora as regression tests: `replay_fuzz_gguf fuzz/corpus/fuzz_gguf`.
// Arguments are files or folders (every regular file inside, in name order). A crash or a
// failed fuzz check ends the process; the input being replayed is named on stderr first.
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <signal.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Defined only by the targets that load something once.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

char current_input[4096];

void name_input_and_die(int signal) {
  const char prefix[] = "replay: died on input ";
  [[maybe_unused]] auto r1 = ::write(2, prefix, sizeof prefix - 1);
  [[maybe_unused]] auto r2 = ::write(2, current_input, std::strlen(current_input));
  [[maybe_unused]] auto r3 = ::write(2, "\n", 1);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

std::vector<std::filesystem::path> inputs_of(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    if (!std::filesystem::is_directory(arg)) {
      inputs.push_back(arg);
      continue;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(arg))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    inputs.insert(inputs.end(), files.begin(), files.end());
  }
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  const std::vector<std::filesystem::path> inputs = inputs_of(argc, argv);
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs (usage: %s CORPUS_DIR_OR_FILE...)\n", argv[0]);
    return 1;  // replaying nothing would pass without testing anything
  }
  // On a stack of its own, the handler also names an input that overflowed the stack.
  static char alternate_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alternate_stack;
  ss.ss_size = sizeof alternate_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction action{};
  action.sa_handler = name_input_and_die;
  action.sa_flags = SA_ONSTACK;
  for (int signal : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(signal, &action, nullptr);
  for (const auto& path : inputs) {
    std::snprintf(current_input, sizeof current_input, "%s", path.c_str());
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 1;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // An exact-size copy, as libFuzzer hands it: a sanitizer build sees any read past the end.
    const std::unique_ptr<uint8_t[]> data(new uint8_t[bytes.size()]);
    std::copy(bytes.begin(), bytes.end(), data.get());
    LLVMFuzzerTestOneInput(data.get(), bytes.size());
  }
  std::printf("replayed %zu inputs without a finding\n", inputs.size());
  return 0;
}
