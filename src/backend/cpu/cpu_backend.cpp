#include "backend/cpu/cpu_backend.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "kv/host_storage.h"

namespace cellm::cpu {
namespace {

constexpr size_t kAlignment = 64;

// Allocation header so release() knows the size for the accounting.
struct alignas(kAlignment) AllocationHeader {
  size_t bytes;
};

}  // namespace

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

std::string CpuBackend::description() const {
  return "cpu (" + cpu_features_summary() + ", " + std::to_string(pool_.size()) + " threads, matmul " +
         std::string(matmul_isa_name(default_matmul_isa())) + ")";
}

void* CpuBackend::allocate(size_t bytes, const char* what) {
  const size_t total = (sizeof(AllocationHeader) + bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, total);
  if (p == nullptr) fail(ErrorCode::OutOfMemory, "cannot allocate ", bytes, " bytes of host memory for ", what);
  static_cast<AllocationHeader*>(p)->bytes = bytes;
  const size_t now = allocated_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return static_cast<char*>(p) + sizeof(AllocationHeader);
}

void CpuBackend::release(void* p) {
  if (p == nullptr) return;
  auto* header = reinterpret_cast<AllocationHeader*>(static_cast<char*>(p) - sizeof(AllocationHeader));
  allocated_.fetch_sub(header->bytes);
  std::free(header);
}

void CpuBackend::upload(void* dst, const void* host_src, size_t bytes) { std::memcpy(dst, host_src, bytes); }
void CpuBackend::download(void* host_dst, const void* src, size_t bytes) { std::memcpy(host_dst, src, bytes); }

backend::TensorRef CpuBackend::place_weight(const TensorRef& host_weight, const std::string&) { return host_weight; }

backend::TensorRef CpuBackend::place_stacked_weight(std::span<const TensorRef> host_parts, const std::string& name) {
  if (host_parts.empty() || host_parts.size() > kMostStackedParts)
    fail(ErrorCode::Internal, "stacked weight '", name, "' of ", host_parts.size(), " parts (1 to ", kMostStackedParts,
         " are supported)");
  TensorRef placed{nullptr, host_parts.front().dtype, 0, host_parts.front().cols, 0};
  for (const TensorRef& part : host_parts) {
    if (part.dtype != placed.dtype || part.cols != placed.cols || part.parts != nullptr)
      fail(ErrorCode::Internal, "stacked weight '", name, "': parts differ in type or width");
    placed.rows += part.rows;
  }
  const std::vector<TensorRef>& parts = stacked_parts_.emplace_back(host_parts.begin(), host_parts.end());
  placed.parts = parts.data();
  placed.part_count = static_cast<int32_t>(parts.size());
  return placed;
}

std::unique_ptr<kv::KvStorage> CpuBackend::create_kv_storage(size_t bytes_per_row) {
  return std::make_unique<kv::HostStorage>(bytes_per_row);
}

backend::MemoryStats CpuBackend::memory_stats() const {
  backend::MemoryStats s;
  s.allocated = allocated_.load();
  s.peak_allocated = peak_.load();
  return s;
}

void CpuBackend::embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) {
  cpu::embed(pool_, table, tokens, scale, out);
}

void CpuBackend::rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) {
  cpu::rms_norm(pool_, x, weight, group, eps, out);
}

std::span<const WeightMatrix> CpuBackend::weight_parts(const TensorRef& w,
                                                       std::array<WeightMatrix, kMostStackedParts>& storage) {
  // place_stacked_weight bounds the number of parts, so a fixed array holds them.
  const std::span<const TensorRef> pieces =
      w.parts != nullptr ? std::span(w.parts, static_cast<size_t>(w.part_count)) : std::span(&w, 1);
  for (size_t i = 0; i < pieces.size(); ++i)
    storage[i] = {pieces[i].dtype, pieces[i].data, pieces[i].rows, pieces[i].cols, pieces[i].row_stride};
  return {storage.data(), pieces.size()};
}

void CpuBackend::matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) {
  std::array<WeightMatrix, kMostStackedParts> parts;
  cpu::matmul(pool_, weight_parts(w, parts), static_cast<const float*>(x.data),
              static_cast<int64_t>(x.row_stride / sizeof(float)), x.rows, static_cast<float*>(out.data),
              static_cast<int64_t>(out.row_stride / sizeof(float)), bias, scratch_);
}

void CpuBackend::rope(const TensorRef& x, const int32_t* positions, const backend::RopeParams& params) {
  cpu::rope(pool_, x, positions, params);
}

void CpuBackend::kv_store(const TensorRef& k, const TensorRef& v, const backend::KvDestination& dst) {
  cpu::kv_store(pool_, k, v, dst);
}

void CpuBackend::attention(const TensorRef& q, const backend::PagedKv& kv, const int32_t* positions, float scale,
                           const TensorRef& out) {
  cpu::attention(pool_, q, kv, positions, scale, out);
}

void CpuBackend::add(const TensorRef& a, const TensorRef& b, const TensorRef& out) { cpu::add(pool_, a, b, out); }

void CpuBackend::glu(const TensorRef& gate, const TensorRef& up, backend::GluActivation act, const TensorRef& out) {
  cpu::glu(pool_, gate, up, act, out);
}

void CpuBackend::gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) {
  cpu::gather_rows(x, rows, out);
}

void CpuBackend::argmax_rows(const TensorRef& logits, int32_t* out) {
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* row = logits.row<const float>(r);
    const auto cols = static_cast<int32_t>(logits.cols);
    // NaNs never win (as on the GPU): the scan starts at the first number; a row of NaNs gives 0.
    int32_t best = 0;
    while (best + 1 < cols && std::isnan(row[best])) ++best;
    for (int32_t i = best + 1; i < cols; ++i)
      if (row[i] > row[best]) best = i;
    out[r] = std::isnan(row[best]) ? 0 : best;
  }
}

}  // namespace cellm::cpu
