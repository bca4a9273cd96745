#pragma once
// The cell layout (DESIGN.md section 4), the default for batching: one pool of cells shared by
// every sequence, handed out in pages of P cells.
//
// Each sequence owns a page table: its k-th page holds its positions [k*P, (k+1)*P), the cell
// of position q at slot q % P. Its history is always positions [0, length). A page is held by
// one sequence, or shared by reference between a clone and its source; a shared page is
// always full and never written again, so sharing never lets a sequence see another's cell.
// A cell is free again when the last sequence holding its page lets go.
//
// Steps are transactional: prepare() places the step's tokens tentatively (growing the pool
// if needed) and fills the side buffers (step_buffers.h); commit() makes them history;
// abort() gives everything back: sequences, free pages, cell_pos and the occupancy metrics
// are exactly as before prepare. Only capacity a growth added stays (rows, allocated bytes,
// growth count, binding epoch): undoing it would cost a second copy and a second rebinding,
// and the next step reuses it. While a step is pending, remove/rewind/clone are refused.
//
// Errors: InvalidArgument for a caller mistake (a position that is not the sequence's next
// one), NotFound for an unknown sequence, LimitExceeded when the step needs more than
// max_rows, OutOfMemory when the storage cannot grow. Every failure leaves the cache as it
// was, so a scheduler can wait or preempt and retry.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/geometry.h"
#include "kv/metrics.h"
#include "kv/page_pool.h"
#include "kv/step_buffers.h"
#include "kv/storage.h"

namespace cellm::kv {

using SeqId = int32_t;
inline constexpr SeqId kNewSequence = -1;  // in a Demand: a sequence not created yet

struct CellCacheConfig {
  int32_t page_cells = 16;              // P
  int64_t initial_rows = 512;           // rounded up to whole pages
  int64_t max_rows = int64_t{1} << 22;  // growth cap, rounded down to whole pages
  int32_t max_write = 512;              // most tokens in one step
};

// For admission control: a step would add `tokens` tokens to `seq`.
struct Demand {
  SeqId seq = kNewSequence;
  int32_t tokens = 0;
};

class CellCache {
 public:
  // Allocates initial_rows from `storage` (whose row size must be bytes_per_cell).
  CellCache(Geometry geometry, CellCacheConfig config, std::unique_ptr<KvStorage> storage);

  // --- Sequences. Ids are recycled after remove(); there is no cap on their number.
  SeqId create();
  void remove(SeqId seq);
  // Forgets positions >= pos. Rewinding into the middle of a shared page copies the kept part
  // into a private page, so it may grow the pool and fail like a step.
  void rewind(SeqId seq, int32_t pos);
  // A new sequence holding seq's positions [0, upto): whole pages are shared by reference, the
  // partial last page (upto % P cells) is copied into a page of its own.
  SeqId clone(SeqId src, int32_t upto);
  bool exists(SeqId seq) const;
  int32_t length(SeqId seq) const;  // committed positions
  std::span<const int32_t> pages_of(SeqId seq) const;

  // --- Steps. Token i of the step is (seq_ids[i], positions[i]); each sequence's tokens must
  // be consecutive positions starting at its length, in order; sequences may interleave.
  // The buffers stay valid until the next prepare.
  const StepBuffers& prepare(std::span<const SeqId> seq_ids, std::span<const int32_t> positions);
  void commit();
  void abort();
  bool step_pending() const { return pending_; }
  const StepBuffers& step() const { return step_; }
  // The reference rendering of the pending step for window index wi (see step_buffers.h).
  void render_dense_mask(int32_t wi, std::vector<int8_t>& out) const;

  // --- Kernel-visible cell table (see step_buffers.h, SYNC).
  std::span<const int32_t> cell_pos() const { return pool_.cell_pos(); }
  bool all_cell_pos_changed() const { return pool_.all_cell_pos_changed(); }
  std::span<const int64_t> changed_cell_pos_rows() const { return pool_.changed_cell_pos_rows(); }
  void mark_cell_pos_synced() { pool_.mark_synced(); }
  // The sequences owning a cell (empty when free). A diagnostic: O(sequences).
  std::vector<SeqId> owners(int64_t cell) const;

  // --- Admission: pages a step with these demands (one entry per sequence) would take, and
  // whether it fits within max_rows.
  int64_t pages_needed(std::span<const Demand> demands) const;
  bool can_fit(std::span<const Demand> demands) const;

  CacheMetrics metrics() const;
  const Geometry& geometry() const { return geometry_; }
  const CellCacheConfig& config() const { return config_; }
  KvStorage& storage() const { return pool_.storage(); }

 private:
  struct Sequence {
    std::vector<int32_t> pages;
    int32_t max_page = -1;  // highest page id in `pages`: read_len without a sweep of the lists
    int32_t length = 0;
    bool alive = false;
    // Scratch of the step that touched it last (valid when step_stamp == stamp_).
    uint64_t step_stamp = 0;
    int32_t step_end = 0;
    size_t step_pages_before = 0;
    int32_t step_max_page_before = -1;
  };

  Sequence& live(SeqId seq, const char* what);
  const Sequence& live(SeqId seq, const char* what) const;
  void refuse_while_pending(const char* what) const;
  SeqId new_id();
  int32_t pages_for(int32_t positions) const;
  int64_t cell_of(const Sequence& s, int32_t pos) const;
  bool holds(SeqId seq, int64_t cell, int32_t pos) const;  // owners(cell) contains seq
  int32_t history_end(const Sequence& s) const;            // length, or step_end when in the step
  // Copies slots [0, n) of page `from` into a fresh page (reserved by the caller).
  int32_t copy_into_new_page(int32_t from, int32_t n);
  void release_pages_from(Sequence& s, size_t first_page);
  static void recompute_max_page(Sequence& s);
  void validate_step(std::span<const SeqId> seq_ids, std::span<const int32_t> positions);
  void size_step_buffers(std::span<const int32_t> positions);
  void fill_page_lists();
  void add_live_cells(int64_t n);

  Geometry geometry_;
  CellCacheConfig config_;
  PagePool pool_;
  std::vector<Sequence> seqs_;
  std::vector<SeqId> free_ids_;
  int64_t alive_ = 0;
  int64_t live_cells_ = 0;
  int64_t peak_live_cells_ = 0;

  bool pending_ = false;
  uint64_t stamp_ = 0;
  std::vector<SeqId> touched_;  // sequences of the step, in order of first appearance
  std::vector<SeqId> step_seq_;
  std::vector<int32_t> step_pos_;
  StepBuffers step_;
  std::vector<RowCopy> copies_;
};

}  // namespace cellm::kv
