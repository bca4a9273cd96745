#pragma once
// "ggml numerics" (--numerics ggml): a CPU backend that computes every operation in the order
// llama.cpp's CPU build computes it (ggml as vendored by llama-cpp-python 0.3.16, flash
// attention off, f16 KV cache), so that cellm's logits are llama.cpp's bit for bit. It exists
// to check cellm against the reference implementation token for token; cellm's own numerics
// (the default) keep one order per operation on every backend, which is what makes a prompt's
// tokens the same alone or in any batch and on the GPU (see README, Numerics).
//
// ggml's order depends on the instructions it was compiled for: an AVX-512 build sums f16
// dot products, softmax groups and its vector exponential 16 lanes wide, an AVX2 build 8 wide
// with another exponential. Either build is reproduced on any machine: the orders are
// computed, not borrowed from the processor.
//
// What this reproduces, like llama.cpp, depends on how tokens share a forward: a forward of one
// token takes ggml's vector-dot path for attention, one of several tokens its tiled (llamafile)
// path. A forward is the analogue of one of llama.cpp's micro-batches.
#include <string>

namespace cellm::cpu::ggml {

enum class Build {
  Avx2,    // ggml compiled with AVX2 + FMA + F16C, no AVX-512
  Avx512,  // ggml compiled with AVX-512 F/DQ (and VNNI, which changes no result)
};

const char* build_name(Build build);  // "avx2", "avx512"
// The build llama.cpp compiled with -march=native would be on this processor.
Build native_build();
// "ggml-avx2", "ggml-avx512" or "ggml" (the native build); anything else throws.
Build parse_build(const std::string& numerics);

// Width of the build's f32 vector: its dot products, softmax groups and element-wise loops.
inline int vector_lanes(Build build) { return build == Build::Avx512 ? 16 : 8; }

}  // namespace cellm::cpu::ggml
