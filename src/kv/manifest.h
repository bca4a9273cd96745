#pragma once
// The runtime-bound tensors a Program declares (DESIGN.md section 3): logical metadata, no
// payload. The executor binds actual buffers before a run and validates them here; a missing
// or mis-shaped binding is reported by name.
//
// KV bindings a Program declares (declare_kv_bindings), for T = max_write tokens per step:
//   kv.k.<l>, kv.v.<l>   dtype(l)  [rows, n_kv_heads(l), head_dim(l)], row stride bytes_per_cell
//                        (views into the one cell-major pool, see geometry.h)
//   kv.cells             i32 [T]        pool row each token of the step writes
//   kv.cell_pos          i32 [rows]     position held by each pool row (step_buffers.h)
//   kv.read_len          i32 [1]        columns of the dense masks
//   kv.mask.w<w>         i8  [T, read_len]  dense visibility, one per distinct window w
//   kv.page_rows.w<w>    i32 [T + 1]    row i's pages are kv.pages.w<w>[page_rows[i], page_rows[i+1])
//   kv.pages.w<w>        i32 [entries]  page ids, one list per distinct window
// ("rows", "read_len" and "entries" are runtime extents: any value is accepted.)
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kv/geometry.h"

namespace cellm::kv {

inline constexpr int64_t kRuntimeExtent = -1;  // a dim fixed only at bind time

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> dims;  // outermost first; kRuntimeExtent where the extent is dynamic
  int64_t row_stride = 0;     // bytes between consecutive outermost indices; 0 = dense,
                              // kRuntimeExtent = any (e.g. a pool whose layout is chosen at run time)
};

// What the executor actually bound to a declared name.
struct BoundTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  int64_t row_stride = 0;
  const void* data = nullptr;  // may be a device address; null = not bound
};

class Manifest {
 public:
  // Throws InvalidArgument when the name is already declared.
  void declare(TensorSpec spec);
  const std::vector<TensorSpec>& specs() const { return specs_; }
  const TensorSpec* find(std::string_view name) const;

  // The first mismatch between the declarations (in declaration order) and the bindings, as
  // a message naming the binding, or nothing when every declared tensor is bound as declared.
  // Bindings that nothing declares are mismatches too (a misspelt name).
  std::optional<std::string> first_mismatch(std::span<const BoundTensor> bindings) const;
  // Throws the first mismatch: NotFound for a missing binding, InvalidArgument otherwise.
  void validate(std::span<const BoundTensor> bindings) const;

 private:
  std::vector<TensorSpec> specs_;
};

// Names of the KV bindings, shared by the model (declares), executor (binds), kernels.
namespace binding_name {
std::string k_pool(int32_t layer);
std::string v_pool(int32_t layer);
inline constexpr const char* kCells = "kv.cells";
inline constexpr const char* kCellPos = "kv.cell_pos";
inline constexpr const char* kReadLen = "kv.read_len";
std::string mask(int32_t window);
std::string page_rows(int32_t window);
std::string pages(int32_t window);
}  // namespace binding_name

// Which window-dependent side buffers a Program reads: reference kernels read the dense
// masks, fast kernels the page lists.
struct KvSideBuffers {
  bool dense_masks = false;
  bool page_lists = true;
};

// Declares the KV bindings listed at the top of this file (masks and page lists as wanted).
void declare_kv_bindings(Manifest& manifest, const Geometry& geometry, int32_t max_write, KvSideBuffers wanted = {});

}  // namespace cellm::kv
