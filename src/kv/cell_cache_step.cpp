// CellCache steps: prepare / commit / abort, the page lists and the dense reference masks.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "kv/cell_cache.h"

namespace cellm::kv {

namespace {

// The logical pages [first, last] of a sequence that a query at pos reads under `window`.
struct PageRange {
  int32_t first;
  int32_t last;
};

PageRange visible_pages(int32_t pos, int32_t window, int32_t page_cells) {
  const int32_t oldest = window == 0 ? 0 : std::max(0, pos - window + 1);
  return {oldest / page_cells, pos / page_cells};
}

}  // namespace

void CellCache::validate_step(std::span<const SeqId> seq_ids, std::span<const int32_t> positions) {
  if (seq_ids.size() != positions.size()) {
    fail(ErrorCode::InvalidArgument, "kv prepare: ", seq_ids.size(), " seq ids for ", positions.size(), " positions");
  }
  if (seq_ids.empty()) fail(ErrorCode::InvalidArgument, "kv prepare: a step needs at least one token");
  if (seq_ids.size() > static_cast<size_t>(config_.max_write)) {
    fail(ErrorCode::LimitExceeded, "kv prepare: ", seq_ids.size(), " tokens exceed max_write ", config_.max_write);
  }
  ++stamp_;  // invalidates every sequence's step scratch at once
  touched_.clear();
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const SeqId seq = seq_ids[i];
    if (!exists(seq))
      fail(ErrorCode::NotFound, "kv prepare: token ", i, " names sequence ", seq, ", which does not exist");
    Sequence& s = seqs_[static_cast<size_t>(seq)];
    if (s.step_stamp != stamp_) {
      s.step_stamp = stamp_;
      s.step_end = s.length;
      s.step_pages_before = s.pages.size();
      s.step_max_page_before = s.max_page;
      touched_.push_back(seq);
    }
    if (positions[i] != s.step_end) {
      fail(ErrorCode::InvalidArgument, "kv prepare: token ", i, " of sequence ", seq, " has position ", positions[i],
           ", expected ", s.step_end, " (the sequence's next position)");
    }
    if (s.step_end == kFreeCellPos - 1) {
      fail(ErrorCode::LimitExceeded, "kv prepare: sequence ", seq, " reached the largest position ", s.step_end);
    }
    ++s.step_end;
  }
}

void CellCache::size_step_buffers(std::span<const int32_t> positions) {
  const auto T = positions.size();
  step_.n_tokens = static_cast<int32_t>(T);
  step_.cells.resize(T);
  for (WindowPages& wp : step_.windows) {
    wp.page_rows.resize(T + 1);
    int64_t entries = 0;
    wp.page_rows[0] = 0;
    for (size_t i = 0; i < T; ++i) {
      const PageRange r = visible_pages(positions[i], wp.window, config_.page_cells);
      entries += r.last - r.first + 1;
      if (entries > std::numeric_limits<int32_t>::max()) {
        fail(ErrorCode::LimitExceeded, "kv prepare: the page lists of window ", wp.window, " exceed int32 offsets");
      }
      wp.page_rows[i + 1] = static_cast<int32_t>(entries);
    }
    wp.pages.resize(static_cast<size_t>(entries));
  }
}

const StepBuffers& CellCache::prepare(std::span<const SeqId> seq_ids, std::span<const int32_t> positions) {
  if (pending_) fail(ErrorCode::InvalidArgument, "kv prepare: the previous step is still pending (commit or abort it)");
  validate_step(seq_ids, positions);
  // Everything that can fail - allocations and growth - happens before the first change.
  int64_t new_pages = 0;
  for (SeqId seq : touched_) {
    Sequence& s = seqs_[static_cast<size_t>(seq)];
    if (s.length % config_.page_cells != 0 && pool_.refs(s.pages.back()) != 1) {
      fail(ErrorCode::Internal, "kv prepare: sequence ", seq, " would write into a shared page");
    }
    const int32_t pages = pages_for(s.step_end);
    new_pages += pages - static_cast<int64_t>(s.pages.size());
    s.pages.reserve(static_cast<size_t>(pages));
  }
  step_seq_.assign(seq_ids.begin(), seq_ids.end());
  step_pos_.assign(positions.begin(), positions.end());
  size_step_buffers(positions);
  pool_.reserve_free(new_pages, "kv prepare");

  // Commit point: nothing below allocates or throws.
  const int32_t P = config_.page_cells;
  for (SeqId seq : touched_) {
    Sequence& s = seqs_[static_cast<size_t>(seq)];
    while (static_cast<int64_t>(s.pages.size()) * P < s.step_end) {
      s.pages.push_back(pool_.take());
      s.max_page = std::max(s.max_page, s.pages.back());
    }
  }
  for (size_t i = 0; i < step_seq_.size(); ++i) {
    const int64_t cell = cell_of(seqs_[static_cast<size_t>(step_seq_[i])], step_pos_[i]);
    step_.cells[i] = static_cast<int32_t>(cell);
    pool_.set_cell_pos(cell, step_pos_[i]);
  }
  fill_page_lists();
  pending_ = true;
  return step_;
}

void CellCache::fill_page_lists() {
  const int32_t P = config_.page_cells;
  for (WindowPages& wp : step_.windows) {
    int32_t* out = wp.pages.data();
    for (size_t i = 0; i < step_seq_.size(); ++i) {
      const Sequence& s = seqs_[static_cast<size_t>(step_seq_[i])];
      const PageRange r = visible_pages(step_pos_[i], wp.window, P);
      out = std::copy(s.pages.data() + r.first, s.pages.data() + r.last + 1, out);
    }
  }
  // Every listed page belongs to a sequence of the step, so none lies above the highest page
  // those sequences hold.
  int32_t highest_page = -1;
  for (SeqId seq : touched_) highest_page = std::max(highest_page, seqs_[static_cast<size_t>(seq)].max_page);
  step_.read_len = (highest_page + 1) * P;
}

void CellCache::commit() {
  if (!pending_) fail(ErrorCode::InvalidArgument, "kv commit: no step is pending");
  for (SeqId seq : touched_) {
    Sequence& s = seqs_[static_cast<size_t>(seq)];
    add_live_cells(s.step_end - s.length);
    s.length = s.step_end;
  }
  pending_ = false;
}

void CellCache::abort() {
  if (!pending_) fail(ErrorCode::InvalidArgument, "kv abort: no step is pending");
  for (int32_t cell : step_.cells) pool_.set_cell_pos(cell, kFreeCellPos);
  for (SeqId seq : touched_) {
    Sequence& s = seqs_[static_cast<size_t>(seq)];
    while (s.pages.size() > s.step_pages_before) {
      pool_.drop_ref(s.pages.back());
      s.pages.pop_back();
    }
    s.max_page = s.step_max_page_before;
  }
  pending_ = false;
}

void CellCache::render_dense_mask(int32_t wi, std::vector<int8_t>& out) const {
  if (!pending_) fail(ErrorCode::InvalidArgument, "kv dense mask: no step is pending");
  if (wi < 0 || wi >= geometry_.window_count()) {
    fail(ErrorCode::InvalidArgument, "kv dense mask: window index ", wi, " of ", geometry_.window_count());
  }
  const int32_t window = geometry_.windows()[static_cast<size_t>(wi)];
  const auto read_len = static_cast<size_t>(step_.read_len);
  out.assign(step_seq_.size() * read_len, 0);
  // Straight from the rule of DESIGN.md section 4 over the cell table (pos, owners).
  for (size_t i = 0; i < step_seq_.size(); ++i) {
    const int32_t pos_i = step_pos_[i];
    for (size_t cell = 0; cell < read_len; ++cell) {
      const int32_t pos_j = pool_.cell_pos(static_cast<int64_t>(cell));
      const bool occupied = pos_j != kFreeCellPos;
      const bool in_window = pos_j <= pos_i && (window == 0 || pos_j > pos_i - window);
      if (occupied && in_window && holds(step_seq_[i], static_cast<int64_t>(cell), pos_j)) out[i * read_len + cell] = 1;
    }
  }
}

}  // namespace cellm::kv
