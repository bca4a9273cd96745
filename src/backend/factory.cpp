#include "backend/factory.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ggml/ggml_backend.h"
#include "core/error.h"
#include "core/log.h"

#if CELLM_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_info.h"
#endif

namespace cellm::backend {

bool cuda_compiled_in() { return CELLM_HAVE_CUDA != 0; }

std::unique_ptr<Backend> create_backend(const BackendOptions& options) {
  if (options.numerics != "cellm") {
    const cpu::ggml::Build build = cpu::ggml::parse_build(options.numerics);
    if (options.name == "cuda")
      fail(ErrorCode::InvalidArgument, "--numerics ", options.numerics, " runs on the CPU only (use --backend cpu)");
    if (options.name != "cpu" && options.name != "auto")
      fail(ErrorCode::InvalidArgument, "unknown backend '", options.name, "' (choose cpu, cuda or auto)");
    return std::make_unique<cpu::ggml::GgmlCpuBackend>(options.threads, build);
  }
  if (options.name == "cpu") return std::make_unique<cpu::CpuBackend>(options.threads);
  if (options.name != "cuda" && options.name != "auto")
    fail(ErrorCode::InvalidArgument, "unknown backend '", options.name, "' (choose cpu, cuda or auto)");
#if CELLM_HAVE_CUDA
  const cuda::DeviceInfo info = cuda::query_device(options.device);
  if (options.name == "cuda") {
    if (!info.available) fail(ErrorCode::Unsupported, "--backend cuda: no usable GPU (", info.reason, ")");
    return cuda::create_cuda_backend(options.device);
  }
  if (info.available) {
    try {
      return cuda::create_cuda_backend(options.device);
    } catch (const Error& e) {
      log_info("a GPU (", info.name, ") is present but unusable (", e.what(), "): using the CPU");
    }
  }
#else
  if (options.name == "cuda") fail(ErrorCode::Unsupported, "--backend cuda: this cellm was built without CUDA");
#endif
  return std::make_unique<cpu::CpuBackend>(options.threads);
}

}  // namespace cellm::backend
