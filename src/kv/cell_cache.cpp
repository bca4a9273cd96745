#include "kv/cell_cache.h"

#include <algorithm>

#include "core/error.h"

namespace cellm::kv {

namespace {

std::unique_ptr<KvStorage> checked_storage(std::unique_ptr<KvStorage> storage, const Geometry& geometry) {
  if (storage == nullptr) fail(ErrorCode::InvalidArgument, "kv cell cache: no storage");
  if (storage->bytes_per_row() != geometry.bytes_per_cell()) {
    fail(ErrorCode::InvalidArgument, "kv cell cache: storage rows are ", storage->bytes_per_row(),
         " bytes, the geometry's cells are ", geometry.bytes_per_cell());
  }
  return storage;
}

}  // namespace

CellCache::CellCache(Geometry geometry, CellCacheConfig config, std::unique_ptr<KvStorage> storage)
    : geometry_(std::move(geometry)),
      config_(config),
      pool_(checked_storage(std::move(storage), geometry_), config.page_cells, config.initial_rows, config.max_rows) {
  if (config_.max_write <= 0)
    fail(ErrorCode::InvalidArgument, "kv cell cache: max_write is ", config_.max_write, ", must be > 0");
  step_.windows.resize(static_cast<size_t>(geometry_.window_count()));
  for (int32_t wi = 0; wi < geometry_.window_count(); ++wi) {
    step_.windows[static_cast<size_t>(wi)].window = geometry_.windows()[static_cast<size_t>(wi)];
  }
}

// --- Sequences ---------------------------------------------------------------------------

CellCache::Sequence& CellCache::live(SeqId seq, const char* what) {
  return const_cast<Sequence&>(static_cast<const CellCache*>(this)->live(seq, what));
}

const CellCache::Sequence& CellCache::live(SeqId seq, const char* what) const {
  if (seq < 0 || static_cast<size_t>(seq) >= seqs_.size() || !seqs_[static_cast<size_t>(seq)].alive) {
    fail(ErrorCode::NotFound, "kv cell cache: ", what, ": sequence ", seq, " does not exist");
  }
  return seqs_[static_cast<size_t>(seq)];
}

void CellCache::refuse_while_pending(const char* what) const {
  if (pending_)
    fail(ErrorCode::InvalidArgument, "kv cell cache: ", what, " while a step is pending (commit or abort it first)");
}

bool CellCache::exists(SeqId seq) const {
  return seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].alive;
}

int32_t CellCache::length(SeqId seq) const { return live(seq, "length").length; }

std::span<const int32_t> CellCache::pages_of(SeqId seq) const { return live(seq, "pages_of").pages; }

SeqId CellCache::new_id() {
  SeqId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<SeqId>(seqs_.size());
    seqs_.emplace_back();
  }
  Sequence& s = seqs_[static_cast<size_t>(id)];
  s.alive = true;
  s.length = 0;
  s.pages.clear();  // keeps the capacity of the id's previous life
  s.max_page = -1;
  ++alive_;
  return id;
}

SeqId CellCache::create() {
  free_ids_.reserve(seqs_.size() + 1);  // so remove() never allocates
  return new_id();
}

void CellCache::recompute_max_page(Sequence& s) {
  s.max_page = s.pages.empty() ? -1 : *std::max_element(s.pages.begin(), s.pages.end());
}

void CellCache::release_pages_from(Sequence& s, size_t first_page) {
  const int32_t P = config_.page_cells;
  while (s.pages.size() > first_page) {
    const auto k = static_cast<int32_t>(s.pages.size() - 1);
    const int32_t cells = std::min(P, s.length - k * P);
    if (pool_.drop_ref(s.pages.back())) live_cells_ -= cells;
    s.pages.pop_back();
  }
  recompute_max_page(s);
}

void CellCache::remove(SeqId seq) {
  refuse_while_pending("remove");
  Sequence& s = live(seq, "remove");
  release_pages_from(s, 0);
  s.length = 0;
  s.alive = false;
  free_ids_.push_back(seq);
  --alive_;
}

int32_t CellCache::copy_into_new_page(int32_t from, int32_t n) {
  const int32_t P = config_.page_cells;
  const int32_t page = pool_.take();
  copies_.clear();
  for (int32_t slot = 0; slot < n; ++slot) copies_.push_back({int64_t{from} * P + slot, int64_t{page} * P + slot});
  try {
    pool_.storage().copy_rows(copies_);
  } catch (...) {
    pool_.drop_ref(page);
    throw;
  }
  for (const RowCopy& c : copies_) pool_.set_cell_pos(c.to, pool_.cell_pos(c.from));
  return page;
}

void CellCache::rewind(SeqId seq, int32_t pos) {
  refuse_while_pending("rewind");
  Sequence& s = live(seq, "rewind");
  if (pos < 0 || pos > s.length) {
    fail(ErrorCode::InvalidArgument, "kv cell cache: rewind of sequence ", seq, " to position ", pos,
         ", its history is [0, ", s.length, ")");
  }
  if (pos == s.length) return;
  const int32_t P = config_.page_cells;
  const auto kept_pages = static_cast<size_t>(pages_for(pos));
  const int32_t kept_in_last = pos % P;
  if (kept_in_last != 0 && pool_.refs(s.pages[kept_pages - 1]) > 1) {
    // The new last page is shared (hence full): the part this sequence keeps becomes a
    // private copy, so that its next tokens can go into the same page.
    copies_.reserve(static_cast<size_t>(P));
    pool_.reserve_free(1, "kv cell cache: rewind into a shared page");
    const int32_t shared = s.pages[kept_pages - 1];
    s.pages[kept_pages - 1] = copy_into_new_page(shared, kept_in_last);
    pool_.drop_ref(shared);  // still held by the others
    add_live_cells(kept_in_last);
  } else if (kept_in_last != 0) {
    const int64_t first = int64_t{s.pages[kept_pages - 1]} * P;
    const int32_t held = std::min(P, s.length - static_cast<int32_t>(kept_pages - 1) * P);
    for (int32_t slot = kept_in_last; slot < held; ++slot) pool_.set_cell_pos(first + slot, kFreeCellPos);
    live_cells_ -= held - kept_in_last;
  }
  release_pages_from(s, kept_pages);
  s.length = pos;
}

SeqId CellCache::clone(SeqId src, int32_t upto) {
  refuse_while_pending("clone");
  // Everything that can fail happens before the first change (and before `from` is taken:
  // growing seqs_ would move it).
  seqs_.reserve(seqs_.size() + 1);
  free_ids_.reserve(seqs_.size() + 1);
  copies_.reserve(static_cast<size_t>(config_.page_cells));
  const Sequence& from = live(src, "clone");
  if (upto < 0 || upto > from.length) {
    fail(ErrorCode::InvalidArgument, "kv cell cache: clone of sequence ", src, " up to position ", upto,
         ", its history is [0, ", from.length, ")");
  }
  const int32_t P = config_.page_cells;
  const auto whole = static_cast<size_t>(upto / P);
  const int32_t partial = upto % P;
  std::vector<int32_t> pages;
  pages.reserve(static_cast<size_t>(pages_for(upto)));
  if (partial != 0) pool_.reserve_free(1, "kv cell cache: clone of a partial page");
  if (partial != 0) {
    const int32_t copy = copy_into_new_page(from.pages[whole], partial);
    add_live_cells(partial);
    pages.assign(from.pages.begin(), from.pages.begin() + static_cast<std::ptrdiff_t>(whole));
    pages.push_back(copy);
  } else {
    pages.assign(from.pages.begin(), from.pages.begin() + static_cast<std::ptrdiff_t>(whole));
  }
  for (size_t k = 0; k < whole; ++k) pool_.add_ref(pages[k]);
  const SeqId id = new_id();  // within the capacity reserved above
  Sequence& s = seqs_[static_cast<size_t>(id)];
  s.pages.swap(pages);
  recompute_max_page(s);
  s.length = upto;
  return id;
}

// --- Cell table --------------------------------------------------------------------------

int32_t CellCache::pages_for(int32_t positions) const {
  return static_cast<int32_t>((int64_t{positions} + config_.page_cells - 1) / config_.page_cells);
}

int64_t CellCache::cell_of(const Sequence& s, int32_t pos) const {
  const int32_t P = config_.page_cells;
  return int64_t{s.pages[static_cast<size_t>(pos / P)]} * P + pos % P;
}

int32_t CellCache::history_end(const Sequence& s) const {
  return pending_ && s.step_stamp == stamp_ ? s.step_end : s.length;
}

bool CellCache::holds(SeqId seq, int64_t cell, int32_t pos) const {
  const Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (!s.alive || pos >= history_end(s)) return false;
  const auto k = static_cast<size_t>(pos / config_.page_cells);
  return k < s.pages.size() && s.pages[k] == cell / config_.page_cells;
}

std::vector<SeqId> CellCache::owners(int64_t cell) const {
  std::vector<SeqId> out;
  if (cell < 0 || cell >= pool_.rows()) return out;
  const int32_t pos = pool_.cell_pos(cell);
  if (pos == kFreeCellPos) return out;
  for (SeqId seq = 0; static_cast<size_t>(seq) < seqs_.size(); ++seq) {
    if (holds(seq, cell, pos)) out.push_back(seq);
  }
  return out;
}

// --- Admission and metrics ---------------------------------------------------------------

int64_t CellCache::pages_needed(std::span<const Demand> demands) const {
  int64_t pages = 0;
  for (const Demand& d : demands) {
    if (d.seq == kNewSequence) {
      pages += pages_for(d.tokens);
    } else {
      const Sequence& s = live(d.seq, "pages_needed");
      pages += pages_for(s.length + d.tokens) - static_cast<int64_t>(s.pages.size());
    }
  }
  return pages;
}

bool CellCache::can_fit(std::span<const Demand> demands) const {
  return pages_needed(demands) <= pool_.pages_within_limit();
}

void CellCache::add_live_cells(int64_t n) {
  live_cells_ += n;
  peak_live_cells_ = std::max(peak_live_cells_, live_cells_);
}

CacheMetrics CellCache::metrics() const {
  CacheMetrics m;
  m.rows = pool_.rows();
  m.live_cells = live_cells_;
  m.peak_live_cells = peak_live_cells_;
  m.pages_in_use = pool_.pages_in_use();
  m.shared_cells = pool_.shared_pages() * config_.page_cells;  // shared pages are always full
  m.growth_count = pool_.growth_count();
  m.allocated_bytes = pool_.storage().allocated_bytes();
  m.bytes_per_cell = geometry_.bytes_per_cell();
  m.sequences = alive_;
  m.binding_epoch = pool_.storage().binding_epoch();
  return m;
}

}  // namespace cellm::kv
