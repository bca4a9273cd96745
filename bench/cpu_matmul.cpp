// CPU matmul speed on the shapes of the default models, per weight format and ISA path:
// decode (T = 1, memory-bound: watch weight bytes/s) and prefill (T = 128, 512, compute-bound:
// watch FLOP/s). The output matrices only run at T = 1: prefill computes logits for few rows.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "gguf/quant_blocks.h"

namespace {

using cellm::DType;
using cellm::cpu::MatmulIsa;

struct Shape {
  const char* name;
  DType type;
  int64_t rows;  // outputs
  int64_t cols;  // inputs
  bool output_matrix;
};

const Shape kShapes[] = {
    {"smollm2/attn_q", DType::Q4_1, 576, 576, false},    {"smollm2/attn_kv", DType::Q4_1, 192, 576, false},
    {"smollm2/ffn_up", DType::Q4_1, 1536, 576, false},   {"smollm2/ffn_down", DType::Q4_1, 576, 1536, false},
    {"smollm2/output", DType::Q8_0, 49152, 576, true},   {"gemma3/attn_q", DType::Q5_0, 1024, 640, false},
    {"gemma3/attn_v", DType::Q8_0, 256, 640, false},     {"gemma3/attn_out", DType::Q4_K, 640, 1024, false},
    {"gemma3/ffn_up", DType::Q5_0, 2048, 640, false},    {"gemma3/ffn_down", DType::Q6_K, 640, 2048, false},
    {"gemma3/output", DType::Q8_0, 262144, 640, true},   {"f16/square", DType::F16, 1024, 1024, false},
    {"bf16/square", DType::BF16, 1024, 1024, false},     {"f32/square", DType::F32, 1024, 1024, false},
};

// Weights with random codes and small finite scales (speed does not depend on the values,
// but denormal or NaN scales would slow the float units down).
std::vector<uint8_t> make_weights(const Shape& s) {
  const size_t bytes = cellm::row_bytes(s.type, s.cols) * s.rows;
  std::vector<uint8_t> w(bytes);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(&w[i], &state, 8);
  }
  auto set_half = [&](size_t at, uint16_t h) { std::memcpy(&w[at], &h, 2); };
  const auto& info = cellm::dtype_info(s.type);
  if (s.type == DType::F32) {
    for (size_t i = 0; i < bytes; i += 4) w[i + 3] = static_cast<uint8_t>((w[i + 3] & 0x80) | 0x3e);
  } else if (s.type == DType::F16 || s.type == DType::BF16) {
    const uint16_t exponent = s.type == DType::F16 ? 0x3000 : 0x3e00;
    for (size_t i = 0; i < bytes; i += 2) set_half(i, static_cast<uint16_t>(exponent | (w[i] & 0x7f) | (w[i + 1] & 0x80) << 8));
  } else {
    const size_t d_at = s.type == DType::Q6_K ? offsetof(cellm::gguf::BlockQ6_K, d) : 0;
    const bool has_second = s.type == DType::Q4_1 || s.type == DType::Q5_1 || s.type == DType::Q4_K || s.type == DType::Q5_K;
    for (size_t at = 0; at < bytes; at += info.block_bytes) {
      set_half(at + d_at, 0x2000);
      if (has_second) set_half(at + 2, 0x2000);
    }
  }
  return w;
}

void run(benchmark::State& state, const Shape& s, int64_t T, MatmulIsa isa) {
  static cellm::ThreadPool pool(0);
  const std::vector<uint8_t> weights = make_weights(s);
  const cellm::cpu::WeightMatrix w{s.type, weights.data(), s.rows, s.cols, cellm::row_bytes(s.type, s.cols)};
  std::vector<float> x(T * s.cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 201) / 100.0f - 1.0f;
  std::vector<float> out(T * s.rows);
  cellm::cpu::MatmulScratch scratch;
  for (auto _ : state) {
    cellm::cpu::matmul(isa, pool, w, x.data(), s.cols, T, out.data(), s.rows, nullptr, scratch);
    benchmark::DoNotOptimize(out.data());
  }
  using benchmark::Counter;
  state.counters["weights_B/s"] = Counter(static_cast<double>(weights.size()), Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = Counter(2.0 * s.rows * s.cols * T, Counter::kIsIterationInvariantRate);
  state.counters["threads"] = pool.size();
}

const bool registered = [] {
  for (MatmulIsa isa : {MatmulIsa::Avx512, MatmulIsa::Avx2, MatmulIsa::Portable}) {
    if (!cellm::cpu::matmul_isa_available(isa)) continue;
    for (const Shape& s : kShapes) {
      for (int64_t T : {1, 128, 512}) {
        if (s.output_matrix && T > 1) continue;
        if (isa == MatmulIsa::Portable && T > 1) continue;  // minutes per run, and not what we ship on x86
        const std::string name = std::string(cellm::cpu::matmul_isa_name(isa)) + "/" + s.name + "/" +
                                 std::string(cellm::dtype_name(s.type)) + "/T" + std::to_string(T);
        benchmark::RegisterBenchmark(name.c_str(), [&s, T, isa](benchmark::State& st) { run(st, s, T, isa); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  return true;
}();

}  // namespace
