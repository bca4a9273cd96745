// The CUDA matrix product in every weight format and for decode-sized and prefill-sized row
// counts, against a double-precision product of the reference dequantization (tight bounds
// that follow from each path's arithmetic; the GEMV's int8 activations are emulated exactly)
// and against the CPU backend (looser: it quantizes activations its own way). Also: bias,
// batch invariance of the GEMV, real weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "../../common/test_models.h"
#include "backend/cuda/matmul.h"
#include "cuda_test_support.h"
#include "gguf/dequantize.h"
#include "gguf/file.h"

namespace cellm::cuda::testing {
namespace {

// out[t][n] in double, and S[t][n] = sum_k |w x| (the scale rounding errors are relative to).
struct Reference {
  std::vector<double> out;
  std::vector<double> magnitude;
};

// x as the integer GEMV sees it: per 32 values, d = max|x| / 127 and x ~ d * round(x / d).
Rows quantized_like_gpu(const Rows& x) {
  Rows out(x.rows, x.cols);
  for (int64_t t = 0; t < x.rows; ++t)
    for (int64_t u = 0; u < x.cols; u += 32) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x.row(t)[u + i]));
      const float d = amax / 127.0f;
      for (int i = 0; i < 32; ++i) {
        const float q = d == 0.0f ? 0.0f : std::clamp(std::nearbyint(x.row(t)[u + i] / d), -127.0f, 127.0f);
        out.row(t)[u + i] = d * q;  // rounded to float: 2^-24, far below the bounds used
      }
    }
  return out;
}

bool gemv_quantizes(DType type) { return type != DType::F32 && type != DType::F16 && type != DType::BF16; }

// The activations the GPU's matmul effectively multiplies for `T` rows of `type` weights.
Rows effective_input(DType type, const Rows& x, bool force_gemm) {
  return !force_gemm && x.rows <= kGemvMaxRows && gemv_quantizes(type) ? quantized_like_gpu(x) : x;
}

Reference reference_product(const HostWeight& w, int64_t n_rows, const Rows& x, const std::vector<float>& bias) {
  std::vector<float> dense(static_cast<size_t>(w.cols));
  const size_t stride = row_bytes(w.type, w.cols);
  Reference ref{std::vector<double>(static_cast<size_t>(x.rows * n_rows)),
                std::vector<double>(static_cast<size_t>(x.rows * n_rows))};
  for (int64_t n = 0; n < n_rows; ++n) {
    gguf::dequantize_row(w.type, w.bytes.data() + static_cast<size_t>(n) * stride, dense.data(), w.cols);
    for (int64_t t = 0; t < x.rows; ++t) {
      double sum = bias.empty() ? 0.0 : bias[static_cast<size_t>(n)], mag = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double p = static_cast<double>(dense[static_cast<size_t>(k)]) * x.row(t)[k];
        sum += p;
        mag += std::fabs(p);
      }
      ref.out[static_cast<size_t>(t * n_rows + n)] = sum;
      ref.magnitude[static_cast<size_t>(t * n_rows + n)] = mag;
    }
  }
  return ref;
}

// Error bounds relative to S: the GEMV multiplies exact weights with (emulated) activations and
// accumulates in f32 (integer dot products are exact; scales and offsets add a few roundings);
// the tensor-core path rounds both operands to bf16 (2^-9 each).
constexpr double kGemvBound = 1e-4;
constexpr double kGemmBound = 4.5e-3;
constexpr double kF32GemmBound = 1e-4;  // cuBLAS's own f32 summation order
constexpr double kCpuBound = 3e-2;  // the CPU quantizes activations per block to 8 bits

void expect_within(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& magnitude,
                   double bound, const std::string& what) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err / (magnitude[i] + 1e-30));
    if (!(err <= bound * magnitude[i] + 1e-6) && ++bad <= 3)
      ADD_FAILURE() << what << ": output " << i << " got " << got[i] << " want " << want[i] << " (S " << magnitude[i]
                    << ")";
  }
  EXPECT_EQ(bad, 0u) << what << " (worst error " << worst << " of S)";
}

std::vector<float> gpu_product(CudaBackend& gpu, const TensorRef& placed, const Rows& x, const float* d_bias,
                               bool force_gemm) {
  DeviceBuffer d_x(gpu, x.values), d_out(gpu, static_cast<size_t>(x.rows * placed.rows) * sizeof(float));
  const TensorRef gx = Rows::device_ref(d_x, x.rows, x.cols), gout = Rows::device_ref(d_out, x.rows, placed.rows);
  if (force_gemm)
    gpu.matmul_gemm(gx, placed, d_bias, gout);
  else
    gpu.matmul(gx, placed, d_bias, gout);
  return d_out.download<float>(static_cast<size_t>(x.rows * placed.rows));
}

TEST(CudaMatmul, EveryFormatAndRowCountMatchesTheReference) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 133, K = 768;  // odd N: a warp's second row past the end; K: 3 super-blocks
  const Rows source = random_rows(N, K, 101, 0.05f);
  for (DType type : weight_formats()) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (int64_t T : {1, 3, 8, 16, 33, 300}) {
      const Rows x = random_rows(T, K, static_cast<uint32_t>(200 + T));
      const Reference ref = reference_product(w, N, effective_input(type, x, false), {});
      const std::string what = std::string(dtype_name(type)) + " T=" + std::to_string(T);
      expect_within(gpu_product(gpu, placed, x, nullptr, false), ref.out, ref.magnitude,
                    T <= kGemvMaxRows ? kGemvBound : kGemmBound, what);
      if (T == 3 || T == 33) {
        Rows cpu_out(T, N);
        cpu_backend().matmul(x.host_ref(), w.ref(), nullptr, cpu_out.host_ref());
        const std::vector<double> as_double(cpu_out.values.begin(), cpu_out.values.end());
        expect_within(gpu_product(gpu, placed, x, nullptr, false), as_double, ref.magnitude, kCpuBound, what + " vs cpu");
      }
    }
    gpu.release(placed.data);
  }
}

TEST(CudaMatmul, TensorCorePathHandlesSmallRowCountsAndBias) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 70, K = 512;
  const Rows source = random_rows(N, K, 111, 0.05f);
  const std::vector<float> bias = random_floats(N, 112);
  DeviceBuffer d_bias(gpu, bias);
  for (DType type : {DType::F32, DType::BF16, DType::Q4_K, DType::Q5_0}) {
    HostWeight w = quantized_weight(type, source);
    const TensorRef placed = gpu.place_weight(w.ref(), "w");
    for (int64_t T : {1, 5, 40}) {
      const Rows x = random_rows(T, K, static_cast<uint32_t>(300 + T));
      const std::string what = std::string(dtype_name(type)) + " T=" + std::to_string(T);
      const Reference ref = reference_product(w, N, x, bias);
      expect_within(gpu_product(gpu, placed, x, d_bias.as<float>(), true), ref.out, ref.magnitude,
                    type == DType::F32 ? kF32GemmBound : kGemmBound, what + " gemm+bias");
      const Reference auto_ref = reference_product(w, N, effective_input(type, x, false), bias);
      expect_within(gpu_product(gpu, placed, x, d_bias.as<float>(), false), auto_ref.out, auto_ref.magnitude,
                    T <= kGemvMaxRows ? kGemvBound : kGemmBound, what + " auto+bias");
    }
    gpu.release(placed.data);
  }
}

TEST(CudaMatmul, GemvRowsAreTheSameAloneOrInABatch) {
  CELLM_REQUIRE_GPU(gpu);
  const int64_t N = 96, K = 1024, T = kGemvMaxRows;
  HostWeight w = quantized_weight(DType::Q4_K, random_rows(N, K, 121, 0.05f));
  const TensorRef placed = gpu.place_weight(w.ref(), "w");
  const Rows batch = random_rows(T, K, 122);
  const std::vector<float> together = gpu_product(gpu, placed, batch, nullptr, false);
  for (int64_t t = 0; t < T; t += 5) {
    Rows alone(1, K);
    std::copy(batch.row(t), batch.row(t) + K, alone.row(0));
    const std::vector<float> single = gpu_product(gpu, placed, alone, nullptr, false);
    EXPECT_EQ(std::memcmp(single.data(), together.data() + t * N, N * sizeof(float)), 0) << "row " << t;
  }
  gpu.release(placed.data);
}

// Real weights: a slice of the first tensor of each format in the default models, and every
// 2-D tensor of the GGUF named by CELLM_CUDA_WEIGHT_SAMPLES (a file of real tensors small
// enough to take to a GPU machine).
TEST(CudaMatmul, RealWeightsMatchTheReference) {
  CELLM_REQUIRE_GPU(gpu);
  std::vector<std::string> files;
  for (const char* model : {test::kSmolLM2, test::kGemma3})
    if (std::filesystem::exists(test::model_path(model))) files.push_back(test::model_path(model));
  if (const char* samples = std::getenv("CELLM_CUDA_WEIGHT_SAMPLES")) files.push_back(samples);
  if (files.empty()) GTEST_SKIP() << "no default models and no CELLM_CUDA_WEIGHT_SAMPLES file";
  int checked = 0;
  for (const std::string& path : files) {
    auto file = gguf::File::open(path);
    std::vector<DType> seen;
    for (const gguf::TensorInfo& t : file->tensors()) {
      if (t.dims.size() != 2 || !dtype_info(t.type).weight_format) continue;
      if (std::find(seen.begin(), seen.end(), t.type) != seen.end()) continue;
      seen.push_back(t.type);
      const int64_t K = t.dims[0], N = std::min<int64_t>(t.dims[1], 512);
      HostWeight w{t.type, N, K, std::vector<uint8_t>(t.data, t.data + row_bytes(t.type, K) * N)};
      const TensorRef placed = gpu.place_weight(w.ref(), t.name);
      for (int64_t T : {1, 5, 33}) {
        const Rows x = random_rows(T, K, static_cast<uint32_t>(400 + T));
        const Reference ref = reference_product(w, N, effective_input(t.type, x, false), {});
        expect_within(gpu_product(gpu, placed, x, nullptr, false), ref.out, ref.magnitude,
                      T <= kGemvMaxRows ? kGemvBound : kGemmBound,
                      path + ": " + t.name + " (" + std::string(dtype_name(t.type)) + ") T=" + std::to_string(T));
      }
      // Embedding rows of the real table equal the reference dequantization exactly.
      const std::vector<int32_t> tokens = {0, static_cast<int32_t>(N - 1), static_cast<int32_t>(std::min<int64_t>(7, N - 1))};
      DeviceBuffer d_tokens(gpu, tokens), d_out(gpu, tokens.size() * K * sizeof(float));
      gpu.embed(placed, d_tokens.as<int32_t>(), 1.0f, Rows::device_ref(d_out, 3, K));
      const auto got = d_out.download<float>(tokens.size() * K);
      std::vector<float> want(static_cast<size_t>(K));
      for (size_t i = 0; i < tokens.size(); ++i) {
        gguf::dequantize_row(t.type, w.bytes.data() + row_bytes(t.type, K) * tokens[i], want.data(), K);
        EXPECT_EQ(std::memcmp(got.data() + i * K, want.data(), K * sizeof(float)), 0) << t.name << " row " << tokens[i];
      }
      gpu.release(placed.data);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  std::printf("[ info ] real-weight formats checked: %d\n", checked);
}

}  // namespace
}  // namespace cellm::cuda::testing
