// The kernels on real weights of the default models (every weight format they use), against
// the reference: random bytes exercise every bit pattern, this checks real files' layouts.
#include <gtest/gtest.h>

#include "backend/cpu/matmul.h"
#include "common/test_models.h"
#include "gguf/file.h"
#include "matmul_test_support.h"

namespace cellm::cpu {
namespace {

void check_tensors(const std::string& path, const std::vector<std::string>& names) {
  const auto file = gguf::File::open(path);
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (const std::string& name : names) {
    const gguf::TensorInfo& t = file->tensor(name);
    const int64_t rows = std::min<int64_t>(t.rows(), 300);  // the output matrices are large
    const WeightMatrix w{t.type, t.data, rows, t.dims[0], row_bytes(t.type, t.dims[0])};
    const int64_t T = 5;
    const auto x = test::random_activations(T, w.cols, w.cols, 11);
    const auto ref = test::reference_matmul(w, x.data(), w.cols, T);
    for (MatmulIsa isa : test::available_isas()) {
      std::vector<float> out(T * rows);
      matmul(isa, pool, w, x.data(), w.cols, T, out.data(), rows, nullptr, scratch);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], ref.value[i], ref.tolerance[i])
            << name << " (" << dtype_name(t.type) << ") on " << matmul_isa_name(isa) << ", element " << i;
    }
  }
}

TEST(MatmulModels, SmolLM2Weights) {
  CELLM_REQUIRE_MODEL(path, test::kSmolLM2);
  check_tensors(path, {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "token_embd.weight"});
}

TEST(MatmulModels, Gemma3Weights) {
  CELLM_REQUIRE_MODEL(path, test::kGemma3);
  check_tensors(path, {"blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
                       "blk.0.ffn_down.weight", "token_embd.weight"});
}

}  // namespace
}  // namespace cellm::cpu
