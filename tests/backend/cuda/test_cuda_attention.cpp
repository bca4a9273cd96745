// Paged attention on the GPU against the CPU kernel, with side buffers built by a real
// kv::CellCache: clones sharing pages, windowed and full layers, decode rows beside a prefill
// slice, long contexts (split over many blocks, folded in several batches; with a block per
// query head and per KV head) and a large prefill (a block per row and KV head).
// Every pool byte a row may not read is NaN, per layer: any leak shows in the outputs.
// The kernel must give the CPU's bits (backend/attention_order.h) where the CPU's f16 dot uses
// AVX2/FMA, and always for f32/bf16 pools, whichever way it cuts the work: split over blocks
// with the backend's workspace, folded in place for rows the workspace cannot hold, or with no
// workspace at all.
// With its output quantized by the blocks that write it (the output projection's activations),
// the quantized rows are the bytes launch_quantize_activations makes of the float output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "backend/cpu/cpu_features.h"
#include "backend/cuda/kernels.h"
#include "core/half.h"
#include "cuda_test_support.h"
#include "kv/cell_cache.h"
#include "kv/host_storage.h"

namespace cellm::cuda::testing {
namespace {

struct Layout {
  int32_t n_kv_heads;
  int32_t head_dim;
  int32_t group;   // query heads per KV head
  int32_t window;  // of layer 1 (layer 0 sees the full history)
  DType dtype;
};

void write_value(DType dtype, std::byte* row, int64_t i, float v) {
  switch (dtype) {
    case DType::F16: {
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(row + 2 * i, &h, 2);
      break;
    }
    case DType::BF16: {
      const uint16_t b = fp32_to_bf16(v);
      std::memcpy(row + 2 * i, &b, 2);
      break;
    }
    default: std::memcpy(row + 4 * i, &v, 4);
  }
}

// Element i of a pool row written by write_value, widened to float.
float read_value(DType dtype, const std::byte* row, int64_t i) {
  switch (dtype) {
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return fp16_to_fp32(h);
    }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, row + 2 * i, 2);
      return bf16_to_fp32(b);
    }
    default: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
  }
}

class PagedAttentionScenario {
 public:
  explicit PagedAttentionScenario(const Layout& layout)
      : layout_(layout),
        geometry_({{layout.n_kv_heads, layout.head_dim, 0, layout.dtype},
                   {layout.n_kv_heads, layout.head_dim, layout.window, layout.dtype}}) {
    auto host = std::make_unique<kv::HostStorage>(geometry_.bytes_per_cell());
    pool_ = host.get();
    kv::CellCacheConfig config;
    config.page_cells = 16;
    config.initial_rows = 64;  // grows while the scenario runs
    cache_ = std::make_unique<kv::CellCache>(geometry_, config, std::move(host));
  }

  kv::CellCache& cache() { return *cache_; }

  // a: 300 cells; b: a's first 120 and 9 of its own; c: 1000 (eight chunks: split over blocks).
  struct Sequences {
    kv::SeqId a, b, c;
  };
  Sequences three_sequences() {
    Sequences q;
    q.a = cache_->create();
    append(q.a, 300, 100);
    q.b = cache_->clone(q.a, 120);
    append(q.b, 9, 9);
    q.c = cache_->create();
    append(q.c, 1000, 250);
    return q;
  }

  // prepare + K/V for the step's cells (random) + commit unless `keep_pending`.
  void step(const std::vector<kv::SeqId>& seqs, const std::vector<int32_t>& positions, bool keep_pending = false) {
    const kv::StepBuffers& s = cache_->prepare(seqs, positions);
    for (int32_t cell : s.cells) fill_cell(pool_->row(cell), [&] { return noise_(rng_); });
    if (!keep_pending) cache_->commit();
  }

  void append(kv::SeqId seq, int32_t n, int32_t chunk) {
    for (int32_t done = 0; done < n; done += chunk) {
      const int32_t len = std::min(chunk, n - done);
      std::vector<kv::SeqId> seqs(static_cast<size_t>(len), seq);
      std::vector<int32_t> pos(static_cast<size_t>(len));
      for (int32_t i = 0; i < len; ++i) pos[static_cast<size_t>(i)] = cache_->length(seq) + i;
      step(seqs, pos);
    }
  }

  // With a step pending: NaN into every layer's K and V of every cell no row of the step may
  // read in that layer, then GPU vs CPU attention for each layer.
  void compare_pending(CudaBackend& gpu, const std::vector<int32_t>& positions, const std::string& what) {
    const kv::StepBuffers& s = cache_->step();
    const auto T = static_cast<int64_t>(positions.size());
    const auto cell_pos = cache_->cell_pos();
    const int32_t P = cache_->config().page_cells;
    for (int32_t l = 0; l < geometry_.layer_count(); ++l) {
      const kv::WindowPages& wp = s.windows[static_cast<size_t>(geometry_.window_index(l))];
      std::set<int64_t> visible;
      for (int64_t i = 0; i < T; ++i)
        for (int32_t e = wp.page_rows[static_cast<size_t>(i)]; e < wp.page_rows[static_cast<size_t>(i + 1)]; ++e)
          for (int64_t c = int64_t{wp.pages[static_cast<size_t>(e)]} * P; c < int64_t{wp.pages[static_cast<size_t>(e)] + 1} * P; ++c) {
            const int32_t p = cell_pos[static_cast<size_t>(c)];
            if (p <= positions[static_cast<size_t>(i)] && (wp.window == 0 || p > positions[static_cast<size_t>(i)] - wp.window))
              visible.insert(c);
          }
      const float nan = std::nanf("");
      for (int64_t c = 0; c < pool_->rows(); ++c) {
        if (visible.count(c)) continue;
        for (size_t offset : {geometry_.k_offset(l), geometry_.v_offset(l)})
          for (int64_t i = 0; i < int64_t{layout_.n_kv_heads} * layout_.head_dim; ++i)
            write_value(layout_.dtype, pool_->row(c) + offset, i, nan);
      }
      ASSERT_GT(visible.size(), 0u);
    }

    const int64_t q_cols = int64_t{layout_.n_kv_heads} * layout_.group * layout_.head_dim;
    const Rows q = random_rows(T, q_cols, 7 + static_cast<uint32_t>(T));
    const float scale = 1.0f / std::sqrt(static_cast<float>(layout_.head_dim));
    std::vector<uint8_t> pool_bytes(reinterpret_cast<uint8_t*>(pool_->row(0)),
                                    reinterpret_cast<uint8_t*>(pool_->row(0)) + pool_->allocated_bytes());
    DeviceBuffer d_pool(gpu, pool_bytes), d_q(gpu, q.values), d_pos(gpu, positions),
        d_cell_pos(gpu, std::vector<int32_t>(cell_pos.begin(), cell_pos.end())),
        d_out(gpu, q.values.size() * sizeof(float));
    for (int32_t l = 0; l < geometry_.layer_count(); ++l) {
      const kv::WindowPages& wp = s.windows[static_cast<size_t>(geometry_.window_index(l))];
      DeviceBuffer d_page_rows(gpu, wp.page_rows), d_pages(gpu, wp.pages);
      auto paged = [&](const void* base, const int32_t* cp, const int32_t* rows, const int32_t* pages) {
        return backend::PagedKv{static_cast<const char*>(base) + geometry_.k_offset(l),
                                static_cast<const char*>(base) + geometry_.v_offset(l),
                                geometry_.bytes_per_cell(),
                                layout_.dtype,
                                layout_.n_kv_heads,
                                layout_.head_dim,
                                wp.window,
                                P,
                                cp,
                                rows,
                                pages};
      };
      Rows cpu_out(T, q_cols);
      cpu_backend().attention(q.host_ref(), paged(pool_->row(0), cell_pos.data(), wp.page_rows.data(), wp.pages.data()),
                              positions.data(), scale, cpu_out.host_ref());
      const auto device_kv = paged(d_pool.data(), d_cell_pos.as<int32_t>(), d_page_rows.as<int32_t>(), d_pages.as<int32_t>());
      gpu.attention(Rows::device_ref(d_q, T, q_cols), device_kv, d_pos.as<int32_t>(), scale,
                    Rows::device_ref(d_out, T, q_cols));
      std::vector<std::pair<std::string, std::vector<float>>> results;
      results.emplace_back("backend", d_out.download<float>(q.values.size()));
      // Again: the split blocks' arrival counters must be back at zero for the next launch.
      gpu.attention(Rows::device_ref(d_q, T, q_cols), device_kv, d_pos.as<int32_t>(), scale,
                    Rows::device_ref(d_out, T, q_cols));
      results.emplace_back("backend, second launch", d_out.download<float>(q.values.size()));
      // A workspace for two chunks per row and head: longer rows fold in place.
      const size_t two_chunks = static_cast<size_t>(T) * layout_.n_kv_heads * layout_.group * (layout_.head_dim + 2) * 2;
      DeviceBuffer d_partials(gpu, two_chunks * sizeof(float));
      const size_t arrival_count = static_cast<size_t>(T) * layout_.n_kv_heads * layout_.group;
      DeviceBuffer d_arrivals(gpu, std::vector<uint32_t>(arrival_count, 0));
      for (const AttentionWorkspace& ws :
           {AttentionWorkspace{d_partials.as<float>(), two_chunks, d_arrivals.as<unsigned>(), arrival_count, gpu.sm_count()},
            AttentionWorkspace{nullptr, 0, nullptr, 0, gpu.sm_count()}}) {
        launch_attention(Rows::device_ref(d_q, T, q_cols), device_kv, d_pos.as<int32_t>(), scale,
                         Rows::device_ref(d_out, T, q_cols), ws, nullptr, gpu.stream());
        const std::string how = ws.partials ? "two-chunk workspace" : "no workspace";
        results.emplace_back(how, d_out.download<float>(q.values.size()));
        // The output quantized by the blocks that write it (attention_matmul) must be the bytes
        // launch_quantize_activations makes of the float output, which stays the same.
        const size_t q_bytes = quantized_activation_bytes(T, q_cols);
        for (ActivationFormat format : {ActivationFormat::Q8_K, ActivationFormat::Q8_1, ActivationFormat::Q8_0}) {
          const TensorRef out_ref = Rows::device_ref(d_out, T, q_cols);
          const bool supported = attention_quantize_supported(Rows::device_ref(d_q, T, q_cols), device_kv, out_ref,
                                                              format, ws);
          // Heads of whole blocks of the format (32 values: every layout here) always quantize in
          // the kernel, whatever heads a block takes.
          if (layout_.head_dim % activation_block_elems(format) == 0) {
            EXPECT_TRUE(supported) << what << " (" << how << ")";
          }
          if (!supported) continue;
          DeviceBuffer d_got(gpu, std::vector<uint8_t>(q_bytes, 0)), d_want(gpu, std::vector<uint8_t>(q_bytes, 0));
          const AttentionQuantizedOut quantized{format, carve_quantized_activations(d_got.data(), T, q_cols)};
          launch_quantize_activations(out_ref, format, carve_quantized_activations(d_want.data(), T, q_cols),
                                      gpu.stream());
          launch_attention(Rows::device_ref(d_q, T, q_cols), device_kv, d_pos.as<int32_t>(), scale, out_ref, ws,
                           &quantized, gpu.stream());
          const std::string with = how + ", quantized " +
                                   (format == ActivationFormat::Q8_K   ? "Q8_K"
                                    : format == ActivationFormat::Q8_1 ? "Q8_1"
                                                                       : "Q8_0");
          results.emplace_back(with, d_out.download<float>(q.values.size()));
          const std::vector<uint8_t> got = d_got.download<uint8_t>(q_bytes), want = d_want.download<uint8_t>(q_bytes);
          size_t differ = 0;
          for (size_t i = 0; i < q_bytes; ++i) differ += got[i] != want[i];
          EXPECT_EQ(differ, 0u) << what << " layer " << l << " (" << with << "): bytes of the quantized output";
        }
      }
      const std::vector<uint32_t> arrivals = d_arrivals.download<uint32_t>(arrival_count);
      EXPECT_EQ(std::count(arrivals.begin(), arrivals.end(), 0u), static_cast<long>(arrival_count))
          << what << " layer " << l << ": the last split block resets its arrival counter";
      const cpu::CpuFeatures& f = cpu::cpu_features();
      size_t bad = 0;
      for (const auto& [how, got] : results) {
        if (layout_.dtype != DType::F16 || (f.avx2 && f.fma && f.f16c)) {
          EXPECT_EQ(std::memcmp(got.data(), cpu_out.values.data(), got.size() * sizeof(float)), 0)
              << what << " layer " << l << " (" << how << "): the GPU's bits differ from the CPU's";
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(std::isfinite(cpu_out.values[i])) << what << " layer " << l << ": the CPU read a poisoned cell";
          if (!(std::fabs(got[i] - cpu_out.values[i]) <= 1e-4f + 1e-4f * std::fabs(cpu_out.values[i])) && ++bad <= 5)
            ADD_FAILURE() << what << " layer " << l << " (" << how << ") output " << i << ": gpu " << got[i]
                          << " cpu " << cpu_out.values[i];
        }
      }
      EXPECT_EQ(bad, 0u) << what << " layer " << l;
    }
  }

  // With a step pending, the way a decode step runs on the GPU: the step's own cells hold NaN in
  // the device pool until a kv_store writes their K and V, and that store waits behind a long
  // kernel while attention, launched early behind it, may already run up to its wait. Attention
  // must still give the CPU's result over the written values: a kernel that read a cell this
  // step writes before its wait would see the NaN.
  void compare_behind_writer(CudaBackend& gpu, const std::vector<int32_t>& positions, const std::string& what) {
    const kv::StepBuffers& s = cache_->step();
    const auto T = static_cast<int64_t>(positions.size());
    const auto cell_pos = cache_->cell_pos();
    const int32_t P = cache_->config().page_cells;
    const int64_t per_layer = int64_t{layout_.n_kv_heads} * layout_.head_dim;
    std::vector<uint8_t> device_pool(reinterpret_cast<uint8_t*>(pool_->row(0)),
                                     reinterpret_cast<uint8_t*>(pool_->row(0)) + pool_->allocated_bytes());
    for (int32_t cell : s.cells)
      fill_cell(reinterpret_cast<std::byte*>(device_pool.data()) + static_cast<size_t>(cell) * geometry_.bytes_per_cell(),
                [] { return std::nanf(""); });
    const int64_t q_cols = per_layer * layout_.group;
    const Rows q = random_rows(T, q_cols, 11 + static_cast<uint32_t>(T));
    const float scale = 1.0f / std::sqrt(static_cast<float>(layout_.head_dim));
    const int64_t slow_cols = int64_t{1} << 24;  // one block reads 128 MB: a millisecond or more
    const Rows slow_x = random_rows(1, slow_cols, 5);
    DeviceBuffer d_pool(gpu, device_pool), d_q(gpu, q.values), d_pos(gpu, positions), d_cells(gpu, s.cells),
        d_cell_pos(gpu, std::vector<int32_t>(cell_pos.begin(), cell_pos.end())),
        d_out(gpu, q.values.size() * sizeof(float)), d_slow_x(gpu, slow_x.values), d_slow_w(gpu, slow_x.values),
        d_slow_out(gpu, slow_x.values.size() * sizeof(float));
    for (int32_t l = 0; l < geometry_.layer_count(); ++l) {
      // The step's K and V of this layer as the f32 rows a forward would store.
      Rows k(T, per_layer), v(T, per_layer);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < per_layer; ++i) {
          const std::byte* row = pool_->row(s.cells[static_cast<size_t>(t)]);
          k.row(t)[i] = read_value(layout_.dtype, row + geometry_.k_offset(l), i);
          v.row(t)[i] = read_value(layout_.dtype, row + geometry_.v_offset(l), i);
        }
      DeviceBuffer d_k(gpu, k.values), d_v(gpu, v.values);
      const kv::WindowPages& wp = s.windows[static_cast<size_t>(geometry_.window_index(l))];
      DeviceBuffer d_page_rows(gpu, wp.page_rows), d_pages(gpu, wp.pages);
      Rows cpu_out(T, q_cols);
      cpu_backend().attention(q.host_ref(),
                              backend::PagedKv{reinterpret_cast<const char*>(pool_->row(0)) + geometry_.k_offset(l),
                                               reinterpret_cast<const char*>(pool_->row(0)) + geometry_.v_offset(l),
                                               geometry_.bytes_per_cell(), layout_.dtype, layout_.n_kv_heads,
                                               layout_.head_dim, wp.window, P, cell_pos.data(), wp.page_rows.data(),
                                               wp.pages.data()},
                              positions.data(), scale, cpu_out.host_ref());
      char* base = d_pool.as<char>();
      gpu.begin_forward(T);  // early launches, as in a decode step of this width
      gpu.rms_norm(Rows::device_ref(d_slow_x, 1, slow_cols), d_slow_w.as<float>(), static_cast<int32_t>(slow_cols),
                   1e-5f, Rows::device_ref(d_slow_out, 1, slow_cols));
      gpu.kv_store(Rows::device_ref(d_k, T, per_layer), Rows::device_ref(d_v, T, per_layer),
                   backend::KvDestination{base + geometry_.k_offset(l), base + geometry_.v_offset(l),
                                          geometry_.bytes_per_cell(), layout_.dtype, d_cells.as<int32_t>()});
      gpu.attention(Rows::device_ref(d_q, T, q_cols),
                    backend::PagedKv{base + geometry_.k_offset(l), base + geometry_.v_offset(l),
                                     geometry_.bytes_per_cell(), layout_.dtype, layout_.n_kv_heads, layout_.head_dim,
                                     wp.window, P, d_cell_pos.as<int32_t>(), d_page_rows.as<int32_t>(),
                                     d_pages.as<int32_t>()},
                    d_pos.as<int32_t>(), scale, Rows::device_ref(d_out, T, q_cols));
      const std::vector<float> got = d_out.download<float>(q.values.size());
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - cpu_out.values[i]) <= 1e-4f + 1e-4f * std::fabs(cpu_out.values[i])) && ++bad <= 5)
          ADD_FAILURE() << what << " layer " << l << " output " << i << ": gpu " << got[i] << " cpu " << cpu_out.values[i];
      EXPECT_EQ(bad, 0u) << what << " layer " << l;
    }
  }

  // With a decode step pending (each row one sequence's new token): rope_kv_store_attention
  // gives the bits of rope_kv_store then attention - the attention output and every pool byte -
  // for both rotary layouts, the step's own cells NaN until the call stores them. Where the
  // staged kernel takes the rope (attention_rope_supported) the call is one launch, which
  // leaves x unrotated.
  void compare_rope_folded(CudaBackend& gpu, const std::vector<int32_t>& positions, const std::string& what) {
    const kv::StepBuffers& s = cache_->step();
    const auto T = static_cast<int64_t>(positions.size());
    const auto cell_pos = cache_->cell_pos();
    const int32_t P = cache_->config().page_cells;
    const int hd = layout_.head_dim, kv_heads = layout_.n_kv_heads, q_heads = kv_heads * layout_.group;
    const int64_t q_cols = int64_t{q_heads} * hd, kv_cols = int64_t{kv_heads} * hd, x_cols = q_cols + kv_cols;
    std::vector<uint8_t> device_pool(reinterpret_cast<uint8_t*>(pool_->row(0)),
                                     reinterpret_cast<uint8_t*>(pool_->row(0)) + pool_->allocated_bytes());
    for (int32_t cell : s.cells)
      fill_cell(reinterpret_cast<std::byte*>(device_pool.data()) + static_cast<size_t>(cell) * geometry_.bytes_per_cell(),
                [] { return std::nanf(""); });
    const Rows x = random_rows(T, x_cols, 21 + static_cast<uint32_t>(T), 2.0f);
    const Rows v = random_rows(T, kv_cols, 22 + static_cast<uint32_t>(T), 2.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    DeviceBuffer d_pos(gpu, positions), d_cells(gpu, s.cells), d_v(gpu, v.values),
        d_cell_pos(gpu, std::vector<int32_t>(cell_pos.begin(), cell_pos.end()));
    for (backend::RopeLayout layout : {backend::RopeLayout::Interleaved, backend::RopeLayout::Neox}) {
      const backend::RopeParams params{q_heads + kv_heads, hd, hd, 10000.0f, 1.0f, layout};
      for (int32_t l = 0; l < geometry_.layer_count(); ++l) {
        const kv::WindowPages& wp = s.windows[static_cast<size_t>(geometry_.window_index(l))];
        DeviceBuffer d_page_rows(gpu, wp.page_rows), d_pages(gpu, wp.pages);
        DeviceBuffer d_pool_apart(gpu, device_pool), d_pool_folded(gpu, device_pool);
        DeviceBuffer d_x_apart(gpu, x.values), d_x_folded(gpu, x.values);
        DeviceBuffer d_out_apart(gpu, static_cast<size_t>(T * q_cols) * sizeof(float)),
            d_out_folded(gpu, static_cast<size_t>(T * q_cols) * sizeof(float));
        struct Views {
          TensorRef x, q, k;
          backend::KvDestination dst;
          backend::PagedKv kv;
        };
        auto views = [&](DeviceBuffer& dx, DeviceBuffer& dp) {
          Views w;
          w.x = Rows::device_ref(dx, T, x_cols);
          w.q = w.x;
          w.q.cols = q_cols;
          w.k = w.x;
          w.k.data = dx.as<float>() + q_cols;
          w.k.cols = kv_cols;
          char* base = dp.as<char>();
          w.dst = {base + geometry_.k_offset(l), base + geometry_.v_offset(l), geometry_.bytes_per_cell(),
                   layout_.dtype, d_cells.as<int32_t>()};
          w.kv = {base + geometry_.k_offset(l), base + geometry_.v_offset(l), geometry_.bytes_per_cell(),
                  layout_.dtype, kv_heads, hd, wp.window, P, d_cell_pos.as<int32_t>(), d_page_rows.as<int32_t>(),
                  d_pages.as<int32_t>()};
          return w;
        };
        const TensorRef gv = Rows::device_ref(d_v, T, kv_cols);
        const Views apart = views(d_x_apart, d_pool_apart);
        gpu.rope_kv_store(apart.x, d_pos.as<int32_t>(), params, apart.k, gv, apart.dst);
        gpu.attention(apart.q, apart.kv, d_pos.as<int32_t>(), scale, Rows::device_ref(d_out_apart, T, q_cols));
        const Views folded = views(d_x_folded, d_pool_folded);
        const TensorRef out_folded = Rows::device_ref(d_out_folded, T, q_cols);
        gpu.rope_kv_store_attention(folded.x, d_pos.as<int32_t>(), params, folded.k, gv, folded.dst, folded.q,
                                    folded.kv, scale, out_folded, nullptr, nullptr, nullptr, out_folded);
        const std::string how = what + " layer " + std::to_string(l) +
                                (layout == backend::RopeLayout::Neox ? " neox" : " interleaved");
        const std::vector<float> got = d_out_folded.download<float>(static_cast<size_t>(T * q_cols));
        const std::vector<float> want = d_out_apart.download<float>(static_cast<size_t>(T * q_cols));
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << how << ": attention output";
        EXPECT_EQ(d_pool_folded.download<uint8_t>(device_pool.size()), d_pool_apart.download<uint8_t>(device_pool.size()))
            << how << ": pool bytes";
        AttentionRope rope{};
        rope.k_new = static_cast<const float*>(folded.k.data);
        rope.v_new = d_v.as<float>();
        rope.angles.half = hd / 2;
        rope.dst = folded.dst;
        if (attention_rope_supported(folded.q, folded.kv, rope, AttentionWorkspace{nullptr, 0, nullptr, 0, gpu.sm_count()})) {
          EXPECT_EQ(d_x_folded.download<float>(x.values.size()), x.values) << how << ": one launch leaves x unrotated";
        }
      }
    }
  }

 private:
  // Every layer's K and V of the pool row at `row`, value() after value().
  template <class Value>
  void fill_cell(std::byte* row, Value&& value) {
    for (int32_t l = 0; l < geometry_.layer_count(); ++l)
      for (size_t offset : {geometry_.k_offset(l), geometry_.v_offset(l)})
        for (int64_t i = 0; i < int64_t{layout_.n_kv_heads} * layout_.head_dim; ++i)
          write_value(layout_.dtype, row + offset, i, value());
  }

  Layout layout_;
  kv::Geometry geometry_;
  kv::HostStorage* pool_ = nullptr;
  std::unique_ptr<kv::CellCache> cache_;
  std::mt19937 rng_{1234};
  std::normal_distribution<float> noise_{0.0f, 1.0f};
};

class CudaAttention : public ::testing::TestWithParam<Layout> {};

TEST_P(CudaAttention, MatchesCpuOverPageListsAndNeverReadsInvisibleCells) {
  CELLM_REQUIRE_GPU(gpu);
  PagedAttentionScenario sc(GetParam());
  kv::CellCache& cache = sc.cache();
  const kv::SeqId a = cache.create();
  sc.append(a, 100, 100);
  const kv::SeqId b = cache.clone(a, 50);  // shares a's first three pages
  ASSERT_EQ(cache.pages_of(b)[0], cache.pages_of(a)[0]);
  sc.append(b, 30, 30);
  const kv::SeqId c = cache.create();
  sc.append(c, 700, 175);  // a long context: many pages, split over blocks
  const kv::SeqId idle = cache.create();
  sc.append(idle, 40, 40);  // never in a step: all its cells are NaN below

  {  // decode rows of a, b, c beside a 20-token prefill of a new sequence
    const kv::SeqId d = cache.create();
    std::vector<kv::SeqId> seqs = {a, b, c};
    std::vector<int32_t> pos = {100, 80, 700};
    for (int32_t i = 0; i < 20; ++i) {
      seqs.push_back(d);
      pos.push_back(i);
    }
    sc.step(seqs, pos, true);
    sc.compare_pending(gpu, pos, "mixed step");
    cache.abort();
    cache.remove(d);
  }
  {  // decode only: the most splits
    const std::vector<int32_t> pos = {100, 80, 700};
    sc.step({a, b, c}, pos, true);
    sc.compare_pending(gpu, pos, "decode step");
    cache.abort();
  }
  {  // a 300-token prefill continuing c: one block per row and KV head, in place
    std::vector<int32_t> pos(300);
    for (int32_t i = 0; i < 300; ++i) pos[static_cast<size_t>(i)] = 700 + i;
    sc.step(std::vector<kv::SeqId>(300, c), pos, true);
    sc.compare_pending(gpu, pos, "prefill step");
    cache.abort();
  }
  {  // last (their NaNs poison the other sequences' cells): rows over more chunks than the last
     // split block folds in one batch (32), one row (a block per query head) and 40 (a block per
     // KV head)
    const kv::SeqId e = cache.create();
    sc.append(e, 8400, 420);
    for (int32_t rows : {1, 40}) {
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (int32_t i = 0; i < rows; ++i) pos[static_cast<size_t>(i)] = 8400 + i;
      sc.step(std::vector<kv::SeqId>(static_cast<size_t>(rows), e), pos, true);
      sc.compare_pending(gpu, pos, "long context, " + std::to_string(rows) + " rows");
      cache.abort();
    }
  }
}

TEST_P(CudaAttention, ReadsTheCellsItsStepWritesOnlyAfterTheWriter) {
  CELLM_REQUIRE_GPU(gpu);
  PagedAttentionScenario sc(GetParam());
  kv::CellCache& cache = sc.cache();
  const auto [a, b, c] = sc.three_sequences();
  {  // decode rows: each row's own new cell is the one its step writes
    const std::vector<int32_t> pos = {300, 129, 1000};
    sc.step({a, b, c}, pos, true);
    sc.compare_behind_writer(gpu, pos, "decode step");
    cache.abort();
  }
  {  // one row, as a single-stream decode step
    sc.step({c}, {1000}, true);
    sc.compare_behind_writer(gpu, {1000}, "one row");
    cache.abort();
  }
  {  // a prefill slice beside a decode row: the slice's rows see cells of the slice's earlier rows
    std::vector<kv::SeqId> seqs = {a};
    std::vector<int32_t> pos = {300};
    for (int32_t i = 0; i < 12; ++i) {
      seqs.push_back(c);
      pos.push_back(1000 + i);
    }
    sc.step(seqs, pos, true);
    sc.compare_behind_writer(gpu, pos, "prefill slice");
    cache.abort();
  }
}

TEST_P(CudaAttention, FoldedRopeIsRopeKvStoreThenAttention) {
  CELLM_REQUIRE_GPU(gpu);
  PagedAttentionScenario sc(GetParam());
  kv::CellCache& cache = sc.cache();
  const auto [a, b, c] = sc.three_sequences();
  {  // decode rows of three sequences, two sharing a prefix
    const std::vector<int32_t> pos = {300, 129, 1000};
    sc.step({a, b, c}, pos, true);
    sc.compare_rope_folded(gpu, pos, "decode step");
    cache.abort();
  }
  {  // one row over more chunks than split slots: the own cell in a block's later chunk
    const kv::SeqId e = cache.create();
    sc.append(e, 8400, 420);
    sc.step({e}, {8400}, true);
    sc.compare_rope_folded(gpu, {8400}, "long context, one row");
    cache.abort();
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaAttention,
                         ::testing::Values(Layout{3, 64, 3, 24, DType::F16},    // SmolLM2-like
                                           Layout{1, 256, 4, 40, DType::F16},   // Gemma-3-like
                                           Layout{2, 128, 4, 0, DType::F16},    // Llama-3-like
                                           Layout{2, 96, 3, 0, DType::F16},     // head_dim not dividing 128
                                           Layout{2, 128, 2, 0, DType::BF16},   // no window
                                           Layout{4, 32, 8, 17, DType::F32}));  // wide groups

}  // namespace
}  // namespace cellm::cuda::testing
