#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/test_models.h"
#include "common/tiny_models.h"
#include "core/error.h"
#include "gguf/file.h"
#include "gguf/writer.h"
#include "model/config.h"
#include "model/decoder_program.h"
#include "model/program_builder.h"
#include "model/random_model.h"

namespace cellm::model {
namespace {

int count_ops(const Program& p, OpCode code) {
  return static_cast<int>(std::count_if(p.ops.begin(), p.ops.end(), [&](const Op& op) { return op.code == code; }));
}

TEST(DecoderProgram, LlamaHasOneAttentionPerLayerAndOneOutput) {
  const auto file = gguf::File::open(test::tiny_model("tiny-llama"));
  const ModelConfig c = read_model_config(*file);
  const Program p = build_decoder_program(*file, c, Method::Prefill, 64);
  EXPECT_EQ(p.max_tokens, 64);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(count_ops(p, OpCode::Attention), c.n_layers);
  EXPECT_EQ(count_ops(p, OpCode::KvStore), c.n_layers);
  // q/k/v and gate/up each run as one matmul over stacked weights (the tiny model's projections
  // share a type), Q and K rotate in one op; the output and down projections add their result
  // to the residual stream in the same op (no post-norms in llama), so there is no Add.
  EXPECT_EQ(count_ops(p, OpCode::MatMul), 2 * c.n_layers + 1);
  EXPECT_EQ(count_ops(p, OpCode::MatMulAdd), 2 * c.n_layers);
  EXPECT_EQ(count_ops(p, OpCode::Add), 0);
  EXPECT_EQ(count_ops(p, OpCode::Rope), c.n_layers);
  EXPECT_EQ(count_ops(p, OpCode::GatherRows), 1);
  EXPECT_EQ(p.value(p.logits).cols, c.vocab_size);
  EXPECT_EQ(p.value(p.logits).extent, Extent::LogitRows);
  EXPECT_EQ(p.step_width_input, p.tokens);
  // The manifest declares every layer's K and V pool and the step buffers.
  EXPECT_NE(p.manifest.find("kv.k.0"), nullptr);
  EXPECT_NE(p.manifest.find("kv.v.1"), nullptr);
  EXPECT_NE(p.manifest.find("kv.cells"), nullptr);
}

TEST(DecoderProgram, ProjectionsUnstackedOnRequest) {
  const auto file = gguf::File::open(test::tiny_model("tiny-llama"));
  const ModelConfig c = read_model_config(*file);
  setenv("CELLM_STACK_PROJECTIONS", "0", 1);
  const Program p = build_decoder_program(*file, c, Method::Decode, 4);
  unsetenv("CELLM_STACK_PROJECTIONS");
  EXPECT_EQ(count_ops(p, OpCode::MatMul), 5 * c.n_layers + 1);
  EXPECT_EQ(count_ops(p, OpCode::MatMulAdd), 2 * c.n_layers);
  EXPECT_EQ(count_ops(p, OpCode::Rope), 2 * c.n_layers);
  for (const ValueInfo& v : p.values) EXPECT_TRUE(v.parts.empty() && v.view_of == kNoValue) << v.name;
}

TEST(DecoderProgram, StackedWeightsAndViewsAreConsistent) {
  const auto file = gguf::File::open(test::tiny_model("tiny-llama"));
  const ModelConfig c = read_model_config(*file);
  const Program p = build_decoder_program(*file, c, Method::Prefill, 16);
  int stacked = 0;
  for (const ValueInfo& v : p.values) {
    if (!v.parts.empty()) {
      ++stacked;
      int64_t rows = 0;
      for (const std::string& part : v.parts) rows += file->tensor(part).dims[1];
      EXPECT_EQ(rows, v.rows) << v.name;
    }
    if (v.view_of != kNoValue) {
      const ValueInfo& owner = p.value(v.view_of);
      EXPECT_EQ(owner.view_of, kNoValue) << "views point at the value that owns the bytes: " << v.name;
      EXPECT_LE(v.view_col + v.cols, owner.cols) << v.name;
      EXPECT_EQ(v.arena_offset, 0u) << "a view takes no arena space: " << v.name;
    }
  }
  EXPECT_EQ(stacked, 2 * c.n_layers);  // q+k+v and gate+up per layer
}

TEST(DecoderProgram, Gemma3HasNormsAndTwoWindows) {
  const auto file = gguf::File::open(test::tiny_model("tiny-gemma3"));
  const ModelConfig c = read_model_config(*file);
  const Program p = build_decoder_program(*file, c, Method::Decode, 4);
  EXPECT_EQ(p.min_tokens, 1);
  // Per layer: attn norm, q/k norms, post-attention, ffn norm, post-ffw; plus the output norm.
  EXPECT_EQ(count_ops(p, OpCode::RmsNorm), 6 * c.n_layers + 1);
  // The post-norms sit between each projection and its residual add: no MatMulAdd.
  EXPECT_EQ(count_ops(p, OpCode::MatMulAdd), 0);
  EXPECT_EQ(count_ops(p, OpCode::Add), 2 * c.n_layers);
  EXPECT_EQ(p.geometry.windows(), (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(c.global_layers(), (std::vector<int32_t>{5}));
  EXPECT_NE(p.manifest.find("kv.pages.w8"), nullptr);
}

// A decode step wants every row's logits, so its program gathers none (the executor picks the
// requested rows of its output); the prefill program of the same model does.
TEST(DecoderProgram, DecodeComputesEveryRowWithoutAGather) {
  for (const char* model : {"tiny-gemma3", "tiny-llama"}) {
    SCOPED_TRACE(model);
    const auto file = gguf::File::open(test::tiny_model(model));
    const ModelConfig c = read_model_config(*file);
    const Program decode = build_decoder_program(*file, c, Method::Decode, 8);
    EXPECT_EQ(count_ops(decode, OpCode::GatherRows), 0);
    EXPECT_EQ(decode.value(decode.logits).extent, Extent::Tokens);
    EXPECT_EQ(count_ops(build_decoder_program(*file, c, Method::Prefill, 8), OpCode::GatherRows), 1);
  }
}

// Past the last attention only the rows whose logits are wanted are computed: the last layer's
// FFN, the final norm and the output matrix take the gathered rows (llama.cpp's graphs do too,
// which ggml numerics depend on: a product's order can follow its row count).
TEST(DecoderProgram, OnlyLogitRowsPassTheLastAttention) {
  for (const char* model : {"tiny-gemma3", "tiny-llama"}) {
    SCOPED_TRACE(model);
    const auto file = gguf::File::open(test::tiny_model(model));
    const Program p = build_decoder_program(*file, read_model_config(*file), Method::Prefill, 16);
    int last_attention = -1, gather = -1;
    for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
      if (p.ops[i].code == OpCode::Attention) last_attention = i;
      if (p.ops[i].code == OpCode::GatherRows) gather = gather < 0 ? i : -2;  // exactly one
    }
    ASSERT_GT(gather, last_attention);
    int after = 0;
    for (int i = gather; i < static_cast<int>(p.ops.size()); ++i) {
      if (p.ops[i].out == kNoValue) continue;
      EXPECT_EQ(p.value(p.ops[i].out).extent, Extent::LogitRows) << p.value(p.ops[i].out).name;
      ++after;
    }
    EXPECT_GE(after, 5);  // gather, ffn norm, gate+up, glu, down (+ residual), output norm, logits
  }
}

void expect_arena_never_overlaps(const Program& p);

TEST(DecoderProgram, ArenaNeverOverlapsLiveValues) {
  for (const char* model : {"tiny-gemma3", "tiny-llama"}) {
    SCOPED_TRACE(model);
    const auto file = gguf::File::open(test::tiny_model(model));
    expect_arena_never_overlaps(build_decoder_program(*file, read_model_config(*file), Method::Prefill, 16));
  }
}

void expect_arena_never_overlaps(const Program& p) {
  // For each op, the output's bytes must not overlap any input's bytes or any value still
  // needed later.
  std::vector<int> last(p.values.size(), -1);
  for (int i = 0; i < static_cast<int>(p.ops.size()); ++i)
    for (ValueId id : {p.ops[i].a, p.ops[i].b, p.ops[i].c, p.ops[i].out})
      if (id != kNoValue) last[id] = i;
  last[p.logits] = static_cast<int>(p.ops.size());
  auto bytes = [&](ValueId id) { return static_cast<size_t>(p.value(id).rows * p.value(id).cols * 4); };
  for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
    const ValueId out = p.ops[i].out;
    if (out == kNoValue) continue;
    for (ValueId other = 0; other < static_cast<ValueId>(p.values.size()); ++other) {
      const ValueInfo& v = p.value(other);
      if (other == out || (v.kind != ValueKind::Activation && v.kind != ValueKind::Output)) continue;
      int first = -1;
      for (int j = 0; j < static_cast<int>(p.ops.size()) && first < 0; ++j)
        if (p.ops[j].out == other) first = j;
      const bool alive = first >= 0 && first <= i && last[other] >= i;
      if (!alive) continue;
      const size_t a0 = p.value(out).arena_offset, a1 = a0 + bytes(out);
      const size_t b0 = v.arena_offset, b1 = b0 + bytes(other);
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << p.value(out).name << " overlaps live " << v.name << " at op " << i;
    }
  }
  // Reuse happens: the arena is much smaller than the sum of all activations.
  size_t total = 0;
  for (const ValueInfo& v : p.values)
    if (v.kind == ValueKind::Activation) total += static_cast<size_t>(v.rows * v.cols * 4);
  EXPECT_LT(p.arena_bytes, total / 4);
}

TEST(DecoderProgram, MissingOrMisshapedWeightIsNamed) {
  const auto good = gguf::File::open(test::tiny_model("tiny-llama"));
  gguf::Writer w;
  for (const auto& [key, value] : good->metadata()) w.set(key, value);
  for (const auto& t : good->tensors()) {
    if (t.name == "blk.1.ffn_up.weight") continue;
    auto dims = t.dims;
    if (t.name == "blk.0.attn_k.weight") dims[1] += 1;
    uint64_t bytes = row_bytes(t.type, dims[0]);
    for (size_t d = 1; d < dims.size(); ++d) bytes *= static_cast<uint64_t>(dims[d]);
    w.add_tensor(t.name, dims, t.type, std::vector<uint8_t>(bytes, 0));
  }
  const auto bytes = w.to_bytes();
  const auto bad = gguf::File::parse(bytes, "bad");
  expect_error(ErrorCode::Format, "blk.0.attn_k.weight",
               [&] { build_decoder_program(*bad, read_model_config(*bad), Method::Prefill, 8); });
}

TEST(ModelConfig, DefaultModelsHaveTheirShapes) {
  CELLM_REQUIRE_MODEL(smol, test::kSmolLM2);
  CELLM_REQUIRE_MODEL(gemma, test::kGemma3);
  const ModelConfig s = read_model_config(*gguf::File::open(smol));
  EXPECT_EQ(s.n_layers, 30);
  EXPECT_EQ(s.rope_layout, RopeLayout::Interleaved);
  EXPECT_TRUE(s.windowed_layers().empty());
  const ModelConfig g = read_model_config(*gguf::File::open(gemma));
  EXPECT_EQ(g.n_layers, 18);
  EXPECT_EQ(g.sliding_window, 512);
  EXPECT_EQ(g.global_layers(), (std::vector<int32_t>{5, 11, 17}));
  EXPECT_FLOAT_EQ(g.layers[0].rope_base, 10000.0f);
  EXPECT_FLOAT_EQ(g.layers[5].rope_base, 1000000.0f);
  EXPECT_FLOAT_EQ(g.attention_scale, 1.0f / 16.0f);
}

// Gemma 3 scales the queries (not the scores) by 1/sqrt(query_pre_attn_scalar): the head size,
// except for 27B (62 layers), whose scalar is n_embd / n_heads.
TEST(ModelConfig, Gemma3ScalesItsQueries) {
  for (const int32_t layers : {6, 62}) {
    model::RandomModelSpec spec = model::random_model_preset("tiny-gemma3");
    spec.n_layers = layers;
    spec.n_embd = 64, spec.n_heads = 4, spec.head_dim = 8;  // n_embd / n_heads = 16
    const std::string path = ::testing::TempDir() + "cellm-gemma3-scale-" + std::to_string(layers) + ".gguf";
    model::write_random_model(spec, path);
    const ModelConfig c = read_model_config(*gguf::File::open(path));
    std::remove(path.c_str());
    EXPECT_TRUE(c.scale_queries);
    EXPECT_FLOAT_EQ(c.attention_scale, layers == 62 ? 0.25f : 1.0f / std::sqrt(8.0f)) << layers << " layers";
  }
  const auto llama = gguf::File::open(test::tiny_model("tiny-llama"));
  EXPECT_FALSE(read_model_config(*llama).scale_queries);
}

// A decode step reads every matrix and norm whole, the embedding table by rows only: unless the
// output is tied to it, when the logits' product reads it whole too.
TEST(DecoderProgram, WeightsReadWholeLeaveOutAnUntiedEmbeddingTable) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied output" : "output.weight");
    model::RandomModelSpec spec = model::random_model_preset("tiny-llama");
    spec.tied_output = tied;
    const std::string path = ::testing::TempDir() + "cellm-read-whole-" + std::to_string(tied) + ".gguf";
    model::write_random_model(spec, path);
    const auto file = gguf::File::open(path);
    const Program p = build_decoder_program(*file, read_model_config(*file), Method::Decode, 4);
    std::remove(path.c_str());
    std::vector<std::string> whole, weights;
    for (const ValueId id : p.weights_read_whole()) whole.push_back(p.value(id).name);
    for (const ValueInfo& v : p.values)
      if (v.kind == ValueKind::Weight) weights.push_back(v.name);
    const bool has_table = std::find(whole.begin(), whole.end(), "token_embd.weight") != whole.end();
    EXPECT_EQ(has_table, tied);
    // Everything else the program binds is read whole, once.
    EXPECT_EQ(whole.size() + (tied ? 0 : 1), weights.size());
    EXPECT_TRUE(std::find(whole.begin(), whole.end(), "output_norm.weight") != whole.end());
    EXPECT_EQ(std::find(whole.begin(), whole.end(), "output.weight") != whole.end(), !tied);
  }
}

TEST(ModelConfig, UnknownArchitectureListsTheSupportedOnes) {
  gguf::Writer w;
  w.set_string("general.architecture", "mamba");
  const auto bytes = w.to_bytes();
  expect_error(ErrorCode::Unsupported, "llama, gemma3", [&] { read_model_config(*gguf::File::parse(bytes, "m")); });
}

}  // namespace
}  // namespace cellm::model
