// Which type each matrix of a random model gets (model/weight_mix.h): llama.cpp's Q4_K_M rule,
// checked by hand for llama3-8b's 32 layers and against a real Q4_K_M file.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "common/test_models.h"
#include "gguf/file.h"
#include "model/random_model.h"
#include "model/weight_mix.h"

namespace cellm::model {
namespace {

constexpr const char* kBlockMatrices[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                          "ffn_gate", "ffn_up", "ffn_down"};

RandomModelSpec q4_k_m(const std::string& preset) {
  RandomModelSpec s = random_model_preset(preset);
  s.mix = WeightMix::Q4_K_M;
  return s;
}

// The layers whose attn_v and ffn_down get q6_K, written out rather than computed: for 32 layers
// the first and last eighth (0-3, 28-31) and every third layer from 6 between them.
TEST(WeightMix, Llama3_8bQ4KMPromotesHalfTheLayersAndTheOutput) {
  const RandomModelSpec s = q4_k_m("llama3-8b");
  ASSERT_EQ(s.n_layers, 32);
  ASSERT_FALSE(s.tied_output);
  const std::set<int32_t> q6_k_layers = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  for (int32_t l = 0; l < s.n_layers; ++l)
    for (const std::string tensor : kBlockMatrices) {
      const bool promoted = (tensor == "attn_v" || tensor == "ffn_down") && q6_k_layers.count(l) > 0;
      EXPECT_EQ(tensor_type(s, tensor, l), promoted ? DType::Q6_K : DType::Q4_K) << "blk." << l << "." << tensor;
    }
  EXPECT_EQ(tensor_type(s, "output"), DType::Q6_K);
  EXPECT_EQ(tensor_type(s, "token_embd"), DType::Q4_K);  // untied: an embedding lookup, no more bits
  EXPECT_EQ(weights_name(s), "q4_k_m");
}

// Tied presets have no output.weight: token_embd makes the logits, so it gets the output's q6_K.
TEST(WeightMix, TiedEmbeddingsTakeTheOutputsType) {
  const RandomModelSpec s = q4_k_m("llama3-1b");
  ASSERT_TRUE(s.tied_output);
  EXPECT_EQ(tensor_type(s, "token_embd"), DType::Q6_K);
  const std::set<int32_t> q6_k_layers = {0, 1, 4, 7, 10, 13, 14, 15};  // 16 layers
  for (int32_t l = 0; l < s.n_layers; ++l)
    EXPECT_EQ(tensor_type(s, "attn_v", l), q6_k_layers.count(l) ? DType::Q6_K : DType::Q4_K) << l;
}

// llama.cpp's "70B" (a llama of 80 layers with grouped-query attention) keeps the other layers'
// attn_v in q5_K; the same depth without GQA (its "65B") does not.
TEST(WeightMix, Llama70bKeepsAttnVInQ5K) {
  RandomModelSpec s = q4_k_m("llama3-8b");
  s.n_layers = 80, s.n_heads = 64, s.n_kv_heads = 8;
  EXPECT_EQ(tensor_type(s, "attn_v", 0), DType::Q6_K);
  EXPECT_EQ(tensor_type(s, "attn_v", 10), DType::Q5_K);
  EXPECT_EQ(tensor_type(s, "attn_v", 12), DType::Q6_K);
  EXPECT_EQ(tensor_type(s, "ffn_down", 10), DType::Q4_K);
  s.n_kv_heads = s.n_heads;
  EXPECT_EQ(tensor_type(s, "attn_v", 10), DType::Q4_K);
}

TEST(WeightMix, UniformIsTheTypeAskedFor) {
  RandomModelSpec s = random_model_preset("llama3-8b");
  for (const std::string tensor : kBlockMatrices) EXPECT_EQ(tensor_type(s, tensor, 0), DType::Q4_K) << tensor;
  EXPECT_EQ(tensor_type(s, "output"), DType::Q4_K);
  EXPECT_EQ(weights_name(s), "q4_K");
  s.type = DType::Q4_1;  // as the SmolLM2 Q4_1 file: embeddings in q8_0
  EXPECT_EQ(tensor_type(s, "token_embd"), DType::Q8_0);
  EXPECT_EQ(tensor_type(s, "attn_q", 0), DType::Q4_1);
}

TEST(WeightMix, NamesTheMixInAnyCase) {
  EXPECT_EQ(weight_mix_from_name("q4_k_m"), WeightMix::Q4_K_M);
  EXPECT_EQ(weight_mix_from_name("Q4_K_M"), WeightMix::Q4_K_M);
  EXPECT_FALSE(weight_mix_from_name("q4_k"));
  EXPECT_FALSE(weight_mix_from_name("q4_k_m2"));
}

// tiny-llama is 64 wide: no row holds a whole 256-element k-quant block, so every matrix falls
// back as llama.cpp's quantizer does (q4_K -> q5_0, q6_K -> q8_0), and the mix survives in the
// fallback types: of its 2 layers, layer 1 (the last eighth) is promoted.
TEST(WeightMix, TinyModelFallsBackLayerByLayer) {
  const std::string path = ::testing::TempDir() + "cellm-weight-mix-tiny.gguf";
  const RandomModelSummary summary = write_random_model(q4_k_m("tiny-llama"), path);
  const auto file = gguf::File::open(path);
  std::remove(path.c_str());
  EXPECT_EQ(summary.fallback_tensors, 1 + 2 * 7);
  EXPECT_EQ(file->tensor("token_embd.weight").type, DType::Q8_0);
  for (const char* name : {"blk.0.attn_v.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight",
                           "blk.1.attn_q.weight", "blk.1.ffn_up.weight"})
    EXPECT_EQ(file->tensor(name).type, DType::Q5_0) << name;
  for (const char* name : {"blk.1.attn_v.weight", "blk.1.ffn_down.weight"})
    EXPECT_EQ(file->tensor(name).type, DType::Q8_0) << name;
}

// The default Gemma 3 model is a llama.cpp Q4_K_M file: the gemma3-270m preset under the mix,
// fallback included, must give every one of its matrices the type it has there.
TEST(WeightMix, MatchesARealQ4KMFile) {
  CELLM_REQUIRE_MODEL(path, test::kGemma3);
  const auto file = gguf::File::open(path);
  const RandomModelSpec s = q4_k_m("gemma3-270m");
  int matrices = 0;
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (t.dims.size() != 2) continue;
    int32_t layer = -1;
    char tensor[64] = {};
    if (std::sscanf(t.name.c_str(), "blk.%d.%63[a-z_].weight", &layer, tensor) != 2 &&
        std::sscanf(t.name.c_str(), "%63[a-z_].weight", tensor) != 1)
      continue;
    EXPECT_EQ(matrix_type(tensor_type(s, tensor, layer), t.dims[0]), t.type) << t.name;
    ++matrices;
  }
  EXPECT_EQ(matrices, 1 + 7 * s.n_layers);
}

}  // namespace
}  // namespace cellm::model
