// Every position's logits of one token sequence on the CPU backend, for comparing cellm's
// numerics with other implementations (e.g. llama.cpp on the ids of tests/data/reference).
//
//   logits_dump FILE.gguf THREADS < ids > logits
//
// stdin: whitespace-separated token ids; stdout: [n_ids x vocab] native float32, row-major.
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "gguf/file.h"
#include "runtime/executor.h"

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::fprintf(stderr, "usage: logits_dump FILE.gguf THREADS < ids > logits\n");
    return 2;
  }
  std::vector<int32_t> ids;
  for (int32_t id; std::cin >> id;) ids.push_back(id);
  const auto file = cellm::gguf::File::open(argv[1]);
  cellm::cpu::CpuBackend backend(std::stoi(argv[2]));
  cellm::runtime::ExecutorOptions options;
  cellm::runtime::Executor executor(backend, *file, options);
  const cellm::kv::SeqId seq = executor.cache().create();
  for (size_t start = 0; start < ids.size(); start += options.max_write) {
    const size_t n = std::min<size_t>(options.max_write, ids.size() - start);
    std::vector<int32_t> positions(n), rows(n);
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(start));
    std::iota(rows.begin(), rows.end(), 0);
    const std::vector<cellm::kv::SeqId> seqs(n, seq);
    const auto logits = executor.run({std::span(ids).subspan(start, n), positions, seqs, rows}).logits;
    if (std::fwrite(logits.data(), sizeof(float), logits.size(), stdout) != logits.size()) {
      cellm::fail(cellm::ErrorCode::Io, "cannot write stdout");
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "logits_dump: %s\n", e.what());
  return 1;
}
