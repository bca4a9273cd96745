#pragma once
// The side buffers of one step, filled by CellCache::prepare as plain host vectors that the
// executor copies to device buffers at fixed addresses. Their meaning is the contract every
// attention kernel (CPU and CUDA) is written from.
//
// A step has T tokens; token i belongs to sequence seq_i at position pos_i (the executor's
// seq_ids/positions inputs). P = page_cells; page p is pool rows [p*P, (p+1)*P).
//
// WRITE. Token i writes its K and V, for every layer, to pool row cells[i]. All T tokens are
//   written before any attention of the step reads (the step's own tokens are keys too).
//
// READ (fast path). For a layer with window w (0 = full history) and wi = its index in
//   Geometry::windows(), the keys of query row i are exactly the cells c such that
//     c lies in a page listed for row i:  pages[wi][e] for e in [page_rows[wi][i], page_rows[wi][i+1])
//     and   cell_pos[c] <= pos_i
//     and   (w == 0 or cell_pos[c] > pos_i - w).
//   cell_pos is the cache's whole-pool array (CellCache::cell_pos(), rows entries); a free
//   cell reads kFreeCellPos (INT32_MAX), which the first test already rejects. The guarantee
//   is two-sided: every cell of a listed page that passes the test is visible to row i under
//   the rule of DESIGN.md section 4, and every visible cell is in a listed page.
//   A row's pages are listed in ascending order of the positions they hold (a sequence's
//   k-th page holds its positions [k*P, (k+1)*P), the cell for position q at slot q % P), so
//   a kernel that walks the list in order meets keys in position order whatever the batch:
//   rows stay independent of each other (batch invariance). A windowed layer's list skips the
//   pages wholly outside the window: a row lists at most ceil((w - 1) / P) + 1 pages there.
//
// READ (reference). read_len bounds every visible cell (all listed pages lie below it). The
//   dense mask of window wi, rendered only on request (CellCache::render_dense_mask), is
//   [T x read_len] int8, 1 where cell c is visible to row i, else 0; it is built from the
//   cell table (pos, owners), not from the page lists, and tests prove the two agree.
//
// SYNC. cell_pos changes between steps too (a removed sequence frees its cells). Before a run
//   the executor brings its device copy up to date: all of cell_pos() when
//   CellCache::all_cell_pos_changed(), else the rows in changed_cell_pos_rows(); then
//   CellCache::mark_cell_pos_synced(). (On the host, bind cell_pos() itself.)
#include <cstdint>
#include <vector>

namespace cellm::kv {

struct WindowPages {
  int32_t window = 0;
  std::vector<int32_t> page_rows;  // T + 1 offsets into pages
  std::vector<int32_t> pages;      // page ids, row after row
};

struct StepBuffers {
  int32_t n_tokens = 0;              // T
  std::vector<int32_t> cells;        // [T] pool row written by each token
  int32_t read_len = 0;              // columns of a dense mask; a multiple of P
  std::vector<WindowPages> windows;  // one per distinct window, in Geometry::windows() order
};

}  // namespace cellm::kv
