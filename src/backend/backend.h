#pragma once
// The interface every backend implements: memory, weight placement, KV pool storage and the
// kernels a Program's ops call. The executor (runtime/) is its only user. On device backends
// kernels are asynchronous and run in issue order; on the CPU they complete before returning.
// Backends know nothing of sessions: the KV side buffers they read are plain arrays.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/ops.h"
#include "core/thread_pool.h"
#include "kv/storage.h"

namespace cellm::backend {

struct MemoryStats {
  size_t device_total = 0;  // 0 on the CPU
  size_t device_used = 0;   // what the device reports in use (all processes)
  size_t allocated = 0;     // what this backend holds now (buffers, weights, KV pools)
  size_t peak_allocated = 0;
};

// A recorded sequence of kernels that can be launched again as one unit (a CUDA graph).
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void launch() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual std::string description() const = 0;  // e.g. "cpu (avx512vnni, 2 threads)"

  // --- memory -------------------------------------------------------------------------------
  // Allocations throw Error(OutOfMemory) naming `what` and the size.
  virtual void* allocate(size_t bytes, const char* what) = 0;
  virtual void release(void* p) = 0;
  // Stream-ordered with the kernels. A source from allocate_host may be read when the stream
  // reaches the copy: keep it unchanged until download() or synchronize() has waited.
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;  // waits for prior work
  // Host memory that download() fills and upload() reads fastest (page-locked on CUDA: pageable
  // memory is copied through the driver's staging buffers). Plain heap memory by default.
  virtual void* allocate_host(size_t bytes, const char* what);
  virtual void release_host(void* p);
  // Makes a weight (a host view into the mapped GGUF file, GGUF layout) available to kernels
  // and returns the view kernels get for it. The CPU uses the mapping in place (no copy, so a
  // process holds its weights once); device backends copy once, and may repack the blocks
  // into a layout of their own (the returned view keeps the dtype and shape).
  virtual TensorRef place_weight(const TensorRef& host_weight, const std::string& name) = 0;
  // Places one weight made of several host tensors of one dtype and width, their rows one
  // after the other (q/k/v or gate/up stacked so one matmul computes them all). A backend that
  // copies weights joins them (place_joined_copy below); one that computes from host memory
  // uses the parts where they are (see TensorRef::parts).
  virtual TensorRef place_stacked_weight(std::span<const TensorRef> host_parts, const std::string& name) = 0;
  virtual std::unique_ptr<kv::KvStorage> create_kv_storage(size_t bytes_per_row) = 0;
  virtual MemoryStats memory_stats() const = 0;

  // --- kernels: rows are out.rows unless stated; every row is computed independently ----------
  // out[t] = dequantize(table[tokens[t]]) * scale
  virtual void embed(const TensorRef& table, const int32_t* tokens, float scale, const TensorRef& out) = 0;
  // out = x / sqrt(mean(x^2) + eps) * weight, over each group of `group` elements of a row.
  virtual void rms_norm(const TensorRef& x, const float* weight, int32_t group, float eps, const TensorRef& out) = 0;
  // out[t][n] = sum_k x[t][k] * w[n][k] (+ bias[n])
  virtual void matmul(const TensorRef& x, const TensorRef& w, const float* bias, const TensorRef& out) = 0;
  // Rotates the first rope_dim dims of each head of x in place, at positions[t].
  virtual void rope(const TensorRef& x, const int32_t* positions, const RopeParams& params) = 0;
  // Writes row t of k and v into pool row dst.cells[t], converting to dst.dtype.
  virtual void kv_store(const TensorRef& k, const TensorRef& v, const KvDestination& dst) = 0;
  // rope(x, positions, params), then kv_store(k, v, dst): bit for bit the two calls, which is
  // the default; k may be columns of x (the rotated K heads). A backend may fuse them (the
  // executor calls this where a Rope op is followed by the KvStore).
  virtual void rope_kv_store(const TensorRef& x, const int32_t* positions, const RopeParams& params,
                             const TensorRef& k, const TensorRef& v, const KvDestination& dst);
  // Causal (and windowed) attention of each query row over the cells its page list names.
  virtual void attention(const TensorRef& q, const PagedKv& kv, const int32_t* positions, float scale,
                         const TensorRef& out) = 0;
  // attention into attn_out, then out = attn_out . w^T (+ bias), or with a residual
  // out = residual + attn_out . w^T (matmul_add, no bias): bit for bit attention then matmul
  // (or matmul_add), which is the default. A backend may fuse them (the executor calls this
  // where an Attention op is followed by a MatMul or MatMulAdd of its output).
  virtual void attention_matmul(const TensorRef& q, const PagedKv& kv, const int32_t* positions, float scale,
                                const TensorRef& attn_out, const TensorRef& w, const float* bias,
                                const TensorRef* residual, const TensorRef& out);
  // A decode step's layer (each row one sequence's one new token, the only cell its step writes
  // that the row sees): rope_kv_store(x, positions, params, k, v, dst), then attention of q over
  // kv into attn_out, then, where w is given, attention_matmul's product into out. Bit for bit
  // those calls, which is the default, except that x's rows may be left unrotated (nothing
  // reads them after). A backend may fuse them (the executor calls this for a decode program's
  // Rope, KvStore and Attention ops in a row).
  virtual void rope_kv_store_attention(const TensorRef& x, const int32_t* positions, const RopeParams& params,
                                       const TensorRef& k, const TensorRef& v, const KvDestination& dst,
                                       const TensorRef& q, const PagedKv& kv, float scale, const TensorRef& attn_out,
                                       const TensorRef* w, const float* bias, const TensorRef* residual,
                                       const TensorRef& out);
  virtual void add(const TensorRef& a, const TensorRef& b, const TensorRef& out) = 0;
  // out = residual + x . w^T, bit for bit matmul into out and then add(residual, out, out);
  // that is the default. A backend may fuse the two.
  virtual void matmul_add(const TensorRef& x, const TensorRef& w, const TensorRef& residual, const TensorRef& out);
  // normed = rms_norm(x, weight) over whole rows, then out = normed . w^T (+ bias): bit for bit
  // rms_norm then matmul, which is the default. A backend may fuse the two (the executor calls
  // this where a whole-row RmsNorm op is followed by a MatMul of its output).
  virtual void rms_norm_matmul(const TensorRef& x, const float* weight, float eps, const TensorRef& normed,
                               const TensorRef& w, const float* bias, const TensorRef& out);
  // out = act(gate) * up
  virtual void glu(const TensorRef& gate, const TensorRef& up, GluActivation act, const TensorRef& out) = 0;
  // glu_out = act(gate) * up, then out = glu_out . w^T (+ bias), or with a residual
  // out = residual + glu_out . w^T (matmul_add, no bias): bit for bit glu then matmul (or
  // matmul_add), which is the default. A backend may fuse them (the executor calls this where a
  // Glu op is followed by a MatMul or MatMulAdd of its output).
  virtual void glu_matmul(const TensorRef& gate, const TensorRef& up, GluActivation act, const TensorRef& glu_out,
                          const TensorRef& w, const float* bias, const TensorRef* residual, const TensorRef& out);
  // out[i] = x[rows[i]]
  virtual void gather_rows(const TensorRef& x, const int32_t* rows, const TensorRef& out) = 0;
  // out[r] = index of the largest value of logits row r (the lowest index among equals; NaNs
  // never win, a row of NaNs gives 0); `out` is backend memory of logits.rows ints. Lets greedy decoding skip copying logits.
  virtual void argmax_rows(const TensorRef& logits, int32_t* out) = 0;

  virtual void synchronize() = 0;

  // --- graphs -------------------------------------------------------------------------------
  // Device backends run decode at static shapes (a step padded to its bucket), so that eager
  // and captured decode compute the same thing; the CPU runs the rows it has.
  virtual bool static_decode_shapes() const { return false; }
  // The host threads the kernels run on (the CPU backend's pool), which host work between
  // forwards may borrow on the thread that issues the forwards; null when the kernels run
  // elsewhere and the host cores are free.
  virtual ThreadPool* host_threads() { return nullptr; }
  virtual bool supports_graphs() const { return false; }
  // Called by the executor before it issues (or captures) a forward of `rows` token rows: a
  // backend may tune how it launches that step's kernels (CUDA: early launches for few rows).
  virtual void begin_forward(int64_t rows) { (void)rows; }
  // Kernels issued between begin_capture and end_capture are recorded, not run. end_capture
  // throws when the recording failed; the backend is then usable again for eager work.
  virtual void begin_capture();
  virtual std::unique_ptr<Graph> end_capture();
};

// place_stacked_weight for a backend whose place_weight copies: joins the parts in a host
// buffer that lives for this call only and places that. Fails (Internal) if the placed weight
// still points into that buffer, which would dangle.
TensorRef place_joined_copy(Backend& backend, std::span<const TensorRef> host_parts, const std::string& name);

}  // namespace cellm::backend
