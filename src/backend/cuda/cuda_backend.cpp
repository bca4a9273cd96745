#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_graph.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/driver_api.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul.h"
#include "core/error.h"

namespace cellm::cuda {
namespace {

// Weight rows are padded to this many bytes so the GEMV's vector loads stay aligned.
constexpr size_t kWeightRowAlignment = 16;

}  // namespace

std::unique_ptr<backend::Backend> create_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

CudaBackend::CudaBackend(int device) : device_(device), memory_(device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || device < 0 || device >= count) {
    (void)cudaGetLastError();
    fail(ErrorCode::Unsupported, "CUDA device ", device, " is not available (",
         err != cudaSuccess ? cudaGetErrorString(err) : "no such device", ")");
  }
  use_device(device_);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  device_name_ = prop.name;
  sm_major_ = prop.major;
  sm_minor_ = prop.minor;
  sm_count_ = prop.multiProcessorCount;
  if (const cudaError_t probe = probe_kernel_image(); probe != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::Unsupported, "this cellm's CUDA kernels cannot run on ", device_name_, " (sm_", sm_major_,
         sm_minor_, "): ", cudaGetErrorString(probe), "; rebuild with CMAKE_CUDA_ARCHITECTURES including it");
  }
  vmm_supported_ = device_supports_vmm(device_);
  kv_growth_ = kv_growth_from_env(vmm_supported_);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  try {
    matmul_ = std::make_unique<Matmul>(stream_, memory_);
    rope_tables_ = std::make_unique<RopeTables>(memory_);
    attention_partials_floats_ = attention_partials_floats();
    attention_partials_ =
        static_cast<float*>(memory_.allocate(attention_partials_floats_ * sizeof(float), "attention partials"));
    attention_arrivals_ =
        static_cast<unsigned*>(memory_.allocate(attention_arrival_count() * sizeof(unsigned), "attention arrivals"));
    check(cudaMemsetAsync(attention_arrivals_, 0, attention_arrival_count() * sizeof(unsigned), stream_),
          "attention arrivals");
    argmax_workspace_.bests =
        memory_.allocate(static_cast<size_t>(kArgmaxSplitMaxRows) * kArgmaxMaxParts * 8, "argmax candidates");
    argmax_workspace_.arrivals =
        static_cast<unsigned*>(memory_.allocate(kArgmaxSplitMaxRows * sizeof(unsigned), "argmax arrivals"));
    check(cudaMemsetAsync(argmax_workspace_.arrivals, 0, kArgmaxSplitMaxRows * sizeof(unsigned), stream_),
          "argmax arrivals");
    check(cudaStreamSynchronize(stream_), "attention and argmax arrivals");
  } catch (...) {
    free_all();
    throw;
  }
}

CudaBackend::~CudaBackend() { free_all(); }

void CudaBackend::free_all() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  matmul_.reset();
  rope_tables_.reset();
  for (void* p : {static_cast<void*>(attention_partials_), static_cast<void*>(attention_arrivals_),
                  argmax_workspace_.bests, static_cast<void*>(argmax_workspace_.arrivals)}) {
    try {
      memory_.release(p);
    } catch (...) {
    }
  }
  attention_partials_ = nullptr;
  attention_arrivals_ = nullptr;
  argmax_workspace_ = {};
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

std::string CudaBackend::description() const {
  std::ostringstream out;
  out << "cuda (" << device_name_ << ", sm_" << sm_major_ << sm_minor_ << ", " << sm_count_ << " SMs, KV growth "
      << kv_growth_name(kv_growth_) << ")";
  return out.str();
}

void* CudaBackend::allocate(size_t bytes, const char* what) { return memory_.allocate(bytes, what); }

void CudaBackend::release(void* p) { memory_.release(p); }

void* CudaBackend::allocate_host(size_t bytes, const char* what) {
  use_device(device_);
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::OutOfMemory, "cannot allocate ", bytes, " bytes of page-locked host memory for ", what, " (",
         cudaGetErrorString(err), ")");
  }
  return p;
}

void CudaBackend::release_host(void* p) {
  if (p != nullptr) (void)cudaFreeHost(p);
}

void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  use_device(device_);
  // From pageable memory this returns once the source has been staged, so the caller may
  // reuse its buffer at once; from page-locked memory (allocate_host) the copy reads it later,
  // when the stream reaches it. Either way it is ordered with the kernels on the stream.
  check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
  use_device(device_);
  if (bytes > 0) check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
  check(cudaStreamSynchronize(stream_), "download (a kernel before it failed)");
}

backend::TensorRef CudaBackend::place_weight(const TensorRef& host_weight, const std::string& name) {
  const size_t row = row_bytes(host_weight.dtype, host_weight.cols);
  const size_t stride = (row + kWeightRowAlignment - 1) / kWeightRowAlignment * kWeightRowAlignment;
  const size_t bytes = stride * static_cast<size_t>(host_weight.rows);
  void* device = memory_.allocate(bytes, name.c_str());
  try {
    check(cudaMemcpy2DAsync(device, stride, host_weight.data, host_weight.row_stride, row,
                            static_cast<size_t>(host_weight.rows), cudaMemcpyHostToDevice, stream_),
          "weight upload");
    check(cudaStreamSynchronize(stream_), "weight upload");
  } catch (...) {
    memory_.release(device);
    throw;
  }
  TensorRef placed = host_weight;
  placed.data = device;
  placed.row_stride = stride;
  return placed;
}

std::unique_ptr<kv::KvStorage> CudaBackend::create_kv_storage(size_t bytes_per_row) {
  return create_kv_storage(bytes_per_row, kv_growth_);
}

std::unique_ptr<DeviceKvStorage> CudaBackend::create_kv_storage(size_t bytes_per_row, KvGrowth growth) {
  use_device(device_);
  if (growth == KvGrowth::Vmm && !vmm_supported_)
    fail(ErrorCode::Unsupported, "in-place KV growth needs virtual memory management, which ", device_name_, " lacks");
  return create_device_kv_storage(growth, bytes_per_row, stream_, memory_);
}

backend::MemoryStats CudaBackend::memory_stats() const {
  backend::MemoryStats s;
  size_t free_bytes = 0, total_bytes = 0;
  use_device(device_);
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    s.device_total = total_bytes;
    s.device_used = total_bytes - free_bytes;
  } else {
    (void)cudaGetLastError();
  }
  s.allocated = memory_.allocated();
  s.peak_allocated = memory_.peak();
  return s;
}

void CudaBackend::embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) {
  use_device(device_);
  launch_embed(table, tokens, scale, out, stream_);
}

void CudaBackend::begin_forward(int64_t rows) { set_early_launches(rows <= kEarlyLaunchMaxRows); }

void CudaBackend::rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) {
  use_device(device_);
  launch_rms_norm(x, weight, group, eps, out, stream_);
}

void CudaBackend::matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) {
  use_device(device_);
  matmul_->run(x, w, bias, out);
}

void CudaBackend::rms_norm_matmul(const TensorRef& x, const float* weight, float eps, const TensorRef& normed,
                                  const TensorRef& w, const float* bias, const TensorRef& out) {
  use_device(device_);
  matmul_->run_normed(x, weight, eps, normed, w, bias, out);
}

namespace {

// What the product adds to its outputs (ProductAddend, every product kernel adds it last with one
// rounded addition: the bits of matmul + add, one launch fewer): the call's bias, or its
// residual, which with one row is the product's bias (the one-row kernel loads a bias while the
// weights arrive) and with more a residual per output. False where the product does not take
// it (a bias and a residual, or a residual not of out's f32 shape): the backend's default then
// makes the calls apart.
//
// In the streaming kernels (a few rows) it paid first: SmolLM2's shape at batch 8, graphs, 4742 ->
// 5222 tok/s (the add and, since the producer's fused call then applies, the GLU's and attention's
// quantize launches gone), llama3-8b batch 8 1138 / 1140 -> 1133 / 1135 (H100, stop 45). The
// tensor-core kernel (from 5 or 9 rows: matmul_exact.cpp) adding the residual too, against an add
// of its own (H100, llama3-8b Q4_K generation, one run, two rounds alternated, with the
// early-started grids spread: kernel_launch.cuh): batch 16 2783 / 2778 -> 2802 / 2806 tok/s, 32
// 4394 / 4402 -> 4526 / 4530, 64 6073 / 6025 -> 6193 / 6160; prompt 10.7 -> 11.1 k tok/s (at 32 and
// 64 rows without the spread too: 4374 / 4369 -> 4434 / 4494, 6082 / 6082 -> 6189 / 6252). Stop 45
// had seen it lose at 16 rows (2436 -> 2227): what lost was not the add but the GLU's kernel that
// quantizes the down projection's rows, which the fused call then takes (Matmul::run_after_glu).
// Started early, during gate/up, it let the down product's blocks start early too, packed onto the
// few multiprocessors free then (kernel trace: down 54 -> 74 us a call); spread, they take one
// multiprocessor each.
bool product_addend(int64_t rows, const float* bias, const TensorRef* residual, const TensorRef& out,
                    ProductAddend& addend) {
  addend = ProductAddend(bias);
  if (residual == nullptr) return true;
  if (bias != nullptr || residual->dtype != DType::F32 || residual->rows != rows || residual->cols != out.cols ||
      residual->row_stride % sizeof(float) != 0)
    return false;
  const auto* rows_data = static_cast<const float*>(residual->data);
  addend = rows == 1 ? ProductAddend(rows_data)
                     : ProductAddend::of_residual(rows_data, residual->row_stride / sizeof(float));
  return true;
}

}  // namespace

void CudaBackend::matmul_add(const TensorRef& x, const TensorRef& w, const TensorRef& residual, const TensorRef& out) {
  ProductAddend addend;
  if (!product_addend(x.rows, nullptr, &residual, out, addend)) return Backend::matmul_add(x, w, residual, out);
  use_device(device_);
  matmul_->run(x, w, addend, out);
}

void CudaBackend::matmul_gemm(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) {
  use_device(device_);
  matmul_->run_gemm(x, w, bias, out);
}

void CudaBackend::rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) {
  use_device(device_);
  launch_rope(x, positions, params, rope_tables_->find(params, stream_), stream_);
}

void CudaBackend::kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) {
  use_device(device_);
  launch_kv_store(k, v, dst, stream_);
}

void CudaBackend::rope_kv_store(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params,
                                const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) {
  use_device(device_);
  if (rope_kv_store_fusable(x, params, k, v, dst))
    return launch_rope_kv_store(x, positions, params, rope_tables_->find(params, stream_), k, v, dst, stream_);
  Backend::rope_kv_store(x, positions, params, k, v, dst);
}

AttentionWorkspace CudaBackend::attention_workspace() const {
  return {attention_partials_, attention_partials_floats_, attention_arrivals_, attention_arrival_count(), sm_count_};
}

void CudaBackend::attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                            const TensorRef& out) {
  use_device(device_);
  launch_attention(q, kv, positions, scale, out, attention_workspace(), nullptr, stream_);
}

// Where the output projection would quantize its activations in a launch of their own, the
// attention kernel's blocks quantize the rows they write (a kernel per layer fewer).
void CudaBackend::attention_matmul(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions,
                                   float scale, const TensorRef& attn_out, const TensorRef& w, const float* bias,
                                   const TensorRef* residual, const TensorRef& out) {
  use_device(device_);
  ProductAddend addend;
  if (!product_addend(attn_out.rows, bias, residual, out, addend))
    return Backend::attention_matmul(q, kv, positions, scale, attn_out, w, bias, residual, out);
  const AttentionWorkspace workspace = attention_workspace();
  matmul_->run_produced(
      attn_out, w, addend, out,
      [&](ActivationFormat format) { return attention_quantize_supported(q, kv, attn_out, format, workspace); },
      [&] { launch_attention(q, kv, positions, scale, attn_out, workspace, nullptr, stream_); },
      [&](ActivationFormat format, const QuantizedActivations& quantized) {
        const AttentionQuantizedOut with{format, quantized};
        launch_attention(q, kv, positions, scale, attn_out, workspace, &with, stream_);
      });
}

// Where the step's attention runs its staged kernel (few rows), that kernel rotates the query
// and the row's new key itself and stores the new K and V: the rope_kv_store launch is gone.
void CudaBackend::rope_kv_store_attention(const TensorRef& x, const int32_t* positions,
                                          const backend::RopeParams& params, const TensorRef& k, const TensorRef& v,
                                          const backend::KvDestination& dst, const TensorRef& q,
                                          const backend::PagedKv& kv, float scale, const TensorRef& attn_out,
                                          const TensorRef* w, const float* bias, const TensorRef* residual,
                                          const TensorRef& out) {
  use_device(device_);
  const AttentionWorkspace workspace = attention_workspace();
  // q must be x's leading heads, in x's rows: every column of it rotates with the same angles.
  const bool q_leads_x = q.data == x.data && q.rows == x.rows && q.row_stride == x.row_stride &&
                         q.dtype == DType::F32 && q.cols <= int64_t{params.n_heads} * params.head_dim;
  const AttentionRope rope{static_cast<const float*>(k.data),
                           k.row_stride / sizeof(float),
                           static_cast<const float*>(v.data),
                           v.row_stride / sizeof(float),
                           rope_angles(params, rope_tables_->find(params, stream_)),
                           params.layout == backend::RopeLayout::Interleaved,
                           dst};
  ProductAddend addend;
  if (!q_leads_x || !rope_kv_store_fusable(x, params, k, v, dst) || kv.head_dim != params.head_dim ||
      k.cols != int64_t{kv.n_kv_heads} * kv.head_dim || !attention_rope_supported(q, kv, rope, workspace) ||
      (w != nullptr && !product_addend(attn_out.rows, bias, residual, out, addend)))
    return Backend::rope_kv_store_attention(x, positions, params, k, v, dst, q, kv, scale, attn_out, w, bias, residual,
                                            out);
  if (w == nullptr) return launch_attention(q, kv, positions, scale, attn_out, workspace, nullptr, stream_, &rope);
  matmul_->run_produced(
      attn_out, *w, addend, out,
      [&](ActivationFormat format) { return attention_quantize_supported(q, kv, attn_out, format, workspace); },
      [&] { launch_attention(q, kv, positions, scale, attn_out, workspace, nullptr, stream_, &rope); },
      [&](ActivationFormat format, const QuantizedActivations& quantized) {
        const AttentionQuantizedOut with{format, quantized};
        launch_attention(q, kv, positions, scale, attn_out, workspace, &with, stream_, &rope);
      });
}

void CudaBackend::add(const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  use_device(device_);
  launch_add(a, b, out, stream_);
}

void CudaBackend::glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) {
  use_device(device_);
  launch_glu(gate, up, act, out, stream_);
}

void CudaBackend::glu_matmul(const TensorRef& gate, const TensorRef& up, backend::GluActivation act,
                             const TensorRef& glu_out, const TensorRef& w, const float* bias, const TensorRef* residual,
                             const TensorRef& out) {
  use_device(device_);
  ProductAddend addend;
  if (!product_addend(glu_out.rows, bias, residual, out, addend))
    return Backend::glu_matmul(gate, up, act, glu_out, w, bias, residual, out);
  matmul_->run_after_glu(gate, up, act, glu_out, w, addend, out);
}

void CudaBackend::gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) {
  use_device(device_);
  launch_gather_rows(x, rows, out, stream_);
}

void CudaBackend::argmax_rows(const TensorRef& logits, int32_t* out) {
  use_device(device_);
  launch_argmax_rows(logits, out, argmax_workspace_, stream_);
}

void CudaBackend::begin_capture() {
  use_device(device_);
  begin_stream_capture(stream_);
}

std::unique_ptr<backend::Graph> CudaBackend::end_capture() { return end_stream_capture(stream_); }

void CudaBackend::synchronize() {
  use_device(device_);
  check(cudaStreamSynchronize(stream_), "synchronize");
}

}  // namespace cellm::cuda
