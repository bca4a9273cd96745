#pragma once
// The merge loop both BPE flavours share. Symbols form a doubly linked list (prev/next
// indices, -1 at the ends); candidate pairs sit in a heap with the best on top. A candidate
// may have been overtaken by an earlier merge: `still_valid` says whether it still applies.
// `fold` merges the right symbol into the left one; `consider(left, right)` queues the pair
// of two symbols if it can merge. Both flavours order equal candidates leftmost first.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace cellm::tokenizer {

template <typename Symbol, typename Candidate, typename StillValid, typename Fold, typename Consider>
void run_merges(std::vector<Symbol>& symbols, std::vector<Candidate>& heap, StillValid&& still_valid, Fold&& fold,
                Consider&& consider) {
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    if (!still_valid(c)) continue;
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    fold(c, left, right);
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
}

}  // namespace cellm::tokenizer
