#pragma once
// The order of attention's arithmetic, which every backend computes bit for bit (CPUs with
// AVX2/FMA/F16C and CUDA; the portable CPU path keeps the structure but sums scores in element
// order). One definition is what lets a row's output not depend on the batch around it
// (DESIGN.md §6) nor on the device, while the GPU still splits a long context across blocks.
//
// For one query row and one query head, the row's page list is read as a list of cells in list
// order; the visible ones (cell_pos <= position, and > position - window on windowed layers)
// take part. The list is cut into chunks of kAttentionChunk list entries (entries, not visible
// cells: a block of the GPU finds its chunk without counting what comes before it). For each
// chunk with at least one visible cell:
//   s_j = dot(q, k_j) * scale   f16 pools: eight lanes of fused multiply-adds (element i into
//                               lane i % 8), folded ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), then
//                               the elements past the last multiple of 8 added one by one;
//                               f32/bf16 pools: products added in element order, unfused
//   m_c = max_j s_j
//   e_j = expf(s_j - m_c)       glibc's expf
//   l_c = sum_j e_j             in float, in cell order, from +0
//   o_c = sum_j e_j * v_j       per element, in cell order, from +0: fused for f16 pools,
//                               unfused for f32/bf16
// The chunks are folded left to right into (m, l, o): the first sets it to (m_c, l_c, o_c);
// each next one does m' = max(m, m_c), a = expf(m - m'), b = expf(m_c - m'),
// l = l*a + l_c*b and o = o*a + o_c*b (products rounded, then added), m = m'. The output is
// o / l (IEEE division), or zeros when no cell is visible.
//
// A single chunk (contexts up to kAttentionChunk entries) is therefore o_c / l_c.
namespace cellm::backend {

inline constexpr int kAttentionChunk = 128;

}  // namespace cellm::backend
