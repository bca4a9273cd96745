#include "backend/cpu/matmul.h"

#include <algorithm>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_scratch.h"
#include "backend/cpu/quant_activations.h"
#include "core/error.h"

namespace cellm::cpu {
namespace {

using detail::QuantizedActivations;
using detail::TileJob;

constexpr int64_t kRowAlign = 16;        // rows per task come in multiples of this
constexpr int64_t kMaxRowsPerTask = 256;
constexpr int64_t kTokensPerTask = detail::kMaxJobTokens;  // keeps a task's activations in L2
constexpr int kTasksPerThread = 8;       // enough pieces for threads that finish unevenly

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

const detail::KernelSet& kernels(MatmulIsa isa) {
  if (!matmul_isa_available(isa))
    fail(ErrorCode::Unsupported, "matmul: the ", matmul_isa_name(isa), " kernels need instructions this CPU lacks");
  switch (isa) {
    case MatmulIsa::Avx512: return detail::avx512_kernels();
    case MatmulIsa::Avx2: return detail::avx2_kernels();
    case MatmulIsa::Portable: break;
  }
  return detail::portable_kernels();
}

void validate(const WeightMatrix& w, int64_t x_stride, int64_t T) {
  if (!matmul_supports(w.type)) fail(ErrorCode::Unsupported, "matmul: weight type ", dtype_name(w.type), " is not supported");
  const int64_t block = dtype_info(w.type).block_size;
  if (w.rows < 0 || w.cols <= 0 || w.cols % block != 0)
    fail(ErrorCode::InvalidArgument, "matmul: weight of ", w.rows, " x ", w.cols, " ", dtype_name(w.type),
         ": cols must be a positive multiple of the block size ", block);
  if (w.row_bytes < row_bytes(w.type, w.cols))
    fail(ErrorCode::InvalidArgument, "matmul: row_bytes ", w.row_bytes, " is less than a row of ", w.cols, " ",
         dtype_name(w.type), " (", row_bytes(w.type, w.cols), " bytes)");
  if (T < 0) fail(ErrorCode::InvalidArgument, "matmul: T = ", T, " is negative");
  if (x_stride < w.cols) fail(ErrorCode::InvalidArgument, "matmul: x_stride ", x_stride, " < cols ", w.cols);
  if (w.data == nullptr && w.rows > 0) fail(ErrorCode::InvalidArgument, "matmul: weight data is null");
}

// Checks every part and that they form one weight; returns its rows (all parts together).
int64_t validate(std::span<const WeightMatrix> parts, int64_t x_stride, int64_t T, int64_t out_stride) {
  if (parts.empty()) fail(ErrorCode::InvalidArgument, "matmul: a weight of no parts");
  int64_t rows = 0;
  for (const WeightMatrix& w : parts) {
    validate(w, x_stride, T);
    if (w.type != parts.front().type || w.cols != parts.front().cols)
      fail(ErrorCode::InvalidArgument, "matmul: weight parts differ: ", dtype_name(w.type), " x ", w.cols, " after ",
           dtype_name(parts.front().type), " x ", parts.front().cols);
    rows += w.rows;
  }
  if (out_stride < rows) fail(ErrorCode::InvalidArgument, "matmul: out_stride ", out_stride, " < rows ", rows);
  return rows;
}

// Quantizes every activation row once, in the layout QuantizedActivations describes.
QuantizedActivations quantize_activations(ThreadPool& pool, MatmulIsa isa, ActivationFormat format, const float* x,
                                          int64_t x_stride, int64_t T, int64_t cols, AlignedBuffer& buffer) {
  struct RowQuantizer {
    ActivationFormat format;
    MatmulIsa isa;
    const float* x;
    int64_t x_stride, cols, tokens, pieces;
    int64_t qs_stride, block_stride, bsums_stride;
    int8_t* qs;
    float* d;
    float* s;
    int16_t* bsums;
    void operator()(int64_t t) const {
      const QuantizedRow row{qs + t * qs_stride, d + t * block_stride, s + t * block_stride, bsums + t * bsums_stride};
      quantize_activation_row(format, x + t * x_stride, cols, row, isa);
    }
  };
  RowQuantizer q{format, isa, x, x_stride, cols, T, T < 4 ? 1 : std::min<int64_t>(T, pool.size() * 4)};
  q.qs_stride = round_up(cols, 64);
  q.block_stride = round_up(cols / activation_block_size(format), 16);
  q.bsums_stride = format == ActivationFormat::Q8_K ? round_up(cols / 16, 32) : 0;
  const size_t qs_bytes = static_cast<size_t>(T * q.qs_stride);
  const size_t float_bytes = static_cast<size_t>(T * q.block_stride) * sizeof(float);
  const size_t bsum_bytes = static_cast<size_t>(T * q.bsums_stride) * sizeof(int16_t);
  std::byte* base = buffer.reserve(qs_bytes + 2 * float_bytes + bsum_bytes);
  q.qs = reinterpret_cast<int8_t*>(base);
  q.d = reinterpret_cast<float*>(base + qs_bytes);
  q.s = reinterpret_cast<float*>(base + qs_bytes + float_bytes);
  q.bsums = reinterpret_cast<int16_t*>(base + qs_bytes + 2 * float_bytes);
  // One captured pointer: std::function stores it without allocating.
  pool.parallel_for(q.pieces, [q = &q](int64_t piece, int) {
    for (int64_t t = piece * q->tokens / q->pieces; t < (piece + 1) * q->tokens / q->pieces; ++t) (*q)(t);
  });
  return {q.qs, q.qs_stride, q.d, q.s, q.block_stride, q.bsums, q.bsums_stride};
}

}  // namespace

bool matmul_supports(DType type) {
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return true;
    default:
      return activation_format_for(type).has_value();
  }
}

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t x_stride, int64_t T, float* out,
            int64_t out_stride, const float* bias, MatmulScratch& scratch) {
  matmul(default_matmul_isa(), pool, std::span(&w, 1), x, x_stride, T, out, out_stride, bias, scratch);
}

void matmul(MatmulIsa isa, ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t x_stride, int64_t T,
            float* out, int64_t out_stride, const float* bias, MatmulScratch& scratch) {
  matmul(isa, pool, std::span(&w, 1), x, x_stride, T, out, out_stride, bias, scratch);
}

void matmul(ThreadPool& pool, std::span<const WeightMatrix> parts, const float* x, int64_t x_stride, int64_t T,
            float* out, int64_t out_stride, const float* bias, MatmulScratch& scratch) {
  matmul(default_matmul_isa(), pool, parts, x, x_stride, T, out, out_stride, bias, scratch);
}

void matmul(MatmulIsa isa, ThreadPool& pool, std::span<const WeightMatrix> parts, const float* x, int64_t x_stride,
            int64_t T, float* out, int64_t out_stride, const float* bias, MatmulScratch& scratch) {
  const int64_t rows = validate(parts, x_stride, T, out_stride);
  const WeightMatrix& first = parts.front();
  const detail::KernelSet& set = kernels(isa);
  const detail::TileKernel kernel = set.kernel_for(first.type);
  if (kernel == nullptr) fail(ErrorCode::Internal, "matmul: no ", matmul_isa_name(isa), " kernel for ", dtype_name(first.type));
  if (T == 0 || rows == 0) return;

  MatmulScratch::Buffers& buffers = scratch.buffers();
  QuantizedActivations act;
  if (const auto format = activation_format_for(first.type))
    act = quantize_activations(pool, isa, *format, x, x_stride, T, first.cols, buffers.activations);

  // Tasks are rectangles of (up to kTokensPerTask tokens) x (a multiple of kRowAlign rows of
  // one part), small enough that every thread gets several; how they are cut never changes a
  // result.
  const int64_t token_blocks = (T + kTokensPerTask - 1) / kTokensPerTask;
  const int64_t target_tasks = pool.size() == 1 ? 1 : static_cast<int64_t>(pool.size()) * kTasksPerThread;
  const int64_t rows_per_task =
      std::clamp(round_up((rows * token_blocks + target_tasks - 1) / target_tasks, kRowAlign), kRowAlign, kMaxRowsPerTask);
  int64_t row_blocks = 0;
  for (const WeightMatrix& w : parts) row_blocks += (w.rows + rows_per_task - 1) / rows_per_task;

  const size_t work_bytes = std::max<size_t>(set.work_bytes(first.type, first.cols), AlignedBuffer::kAlignment);
  if (buffers.work.size() < static_cast<size_t>(pool.size())) buffers.work.resize(pool.size());
  for (int i = 0; i < pool.size(); ++i) buffers.work[i].reserve(work_bytes);

  // The task function captures one pointer, so std::function keeps it without allocating.
  struct Plan {
    TileJob job;  // the fields every task shares
    std::span<const WeightMatrix> parts;
    float* out;
    const float* bias;
    int64_t token_blocks, rows_per_task, tokens;
    const detail::TileKernel kernel;
    std::vector<AlignedBuffer>* work;
  };
  Plan plan{{}, parts, out, bias, token_blocks, rows_per_task, T, kernel, &buffers.work};
  plan.job.act = &act;
  plan.job.x = x;
  plan.job.x_stride = x_stride;
  plan.job.out_stride = out_stride;
  pool.parallel_for(row_blocks * token_blocks, [p = &plan](int64_t task, int thread) {
    TileJob job = p->job;
    // Row block `block` of the weight: the part it falls in, and its first output column.
    int64_t block = task / p->token_blocks, column = 0;
    size_t part = 0;
    for (;; column += p->parts[part].rows, ++part) {
      const int64_t blocks = (p->parts[part].rows + p->rows_per_task - 1) / p->rows_per_task;
      if (block < blocks) break;
      block -= blocks;
    }
    job.w = &p->parts[part];
    job.out = p->out + column;
    job.bias = p->bias == nullptr ? nullptr : p->bias + column;
    job.n_begin = block * p->rows_per_task;
    job.n_end = std::min(job.w->rows, job.n_begin + p->rows_per_task);
    job.t_begin = task % p->token_blocks * kTokensPerTask;
    job.t_end = std::min(p->tokens, job.t_begin + kTokensPerTask);
    job.work = (*p->work)[thread].data();
    p->kernel(job);
  });
}

}  // namespace cellm::cpu
