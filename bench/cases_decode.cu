// Bench group "decode": BatchDecodeWrapper::run, bf16, page 16, head_dim 128, NHD.
// Shapes: Llama-3-8B (32 qo / 8 kv heads) and Llama-2-7B (32 / 32), batch x kv_len where the KV
// cache fits in ~60 GiB, plus a ragged bimodal batch (64 requests, half 512 and half 32K keys).
// Bytes = KV bytes read (each key/value once) + q read + out written; ceiling "read".
// Timing: run() is captured once in a CUDA graph and the graph is timed (what a serving engine
// replays; it also keeps run()'s host-side validation out of the GPU timeline). plan() is timed
// on the host (including the async copy's enqueue): extra "plan_us" is the median of warm calls on
// an idle stream, "plan_b2b_us" back to back (see run_decode_case).
// Pages come from a random permutation of the pool (a fragmented cache); "decode/seqpages/..."
// rows keep pool order. Each row is the median over 3 fresh allocations of the pools (see
// run_decode_case), with the min / max in extras; tuning rows use one allocation.
// Variants "decode/w<W>s<S>/..." rebuild the wrapper with W warps per CTA and S per-warp stages;
// "decode/floor/..." time a plain read kernel over the same KV bytes (the reachable top for one
// kernel of that size). "decode/steady/..." time 8 runs back to back in one graph on rotated
// copies of the pools (the steady state of a serving step; CaseOptions::copies).
// Path variants "decode/path/{tc,cc}/<model>/b<B>/kv<KV>" force each kernel path (GQA groups
// 1, 2, 4, 8) to set the kAuto heuristic (choose_decode_path); the plain rows use kAuto.
// "decode/gqa/..." rows: GQA groups 16, 24, 32 and 64 (several 16-row tiles per KV head).
// "decode/fp8/{bf16,e4m3,e5m2}/..." rows: fp8 KV pools (per-head scales; q and out bf16) next to
// the bf16 row of the same shape measured just before in the same call; bytes count the pools'
// own element size (fp8: 1 byte), and the fp8 rows carry extra.speedup_vs_bf16.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "decode/trace.h"
#include "harness.h"
#include "weft/decode.h"
#include "weft/error.h"
#include "weft/paged_kv.h"

#include "cases_decode_rows.h"

namespace {

using namespace weft::bench::decode_rows;  // Model, CaseOptions, the row runners (cases_decode_rows.h)
using weft::bench::DeviceArray;
using weft::bench::LaunchFn;
using weft::bench::with_graph;

// The ragged bimodal batch: 64 requests, half 512 and half 32K keys, interleaved by a fixed shuffle.
std::vector<int32_t> bimodal_lens() {
  std::vector<int32_t> lens(64);
  for (int i = 0; i < 64; ++i) lens[i] = i % 2 ? 32768 : 512;
  std::shuffle(lens.begin(), lens.end(), std::mt19937_64(11));
  return lens;
}


// "decode/prefix/<model>/b<B>/shared<S>/priv<P>/{decode,share}": B requests whose first S keys
// are the same pages (a system prompt) and P private keys each, pages shuffled in the pool; the
// standard decode (every request reads the shared pages) and DecodeOptions::share_prefixes
// (packs read them once). Bytes count UNIQUE KV bytes (shared pages once) + q + out, so the
// fraction of the read ceiling is on unique bytes; the share row carries
// extra.speedup_vs_decode and extra.unique_fraction_of_ceiling. One allocation per row.
void run_prefix_case(weft::bench::Context& ctx, const Model& m, int32_t batch, int32_t shared, int32_t priv) {
  const std::string base_name = "decode/prefix/" + std::string(m.name) + "/b" + std::to_string(batch) + "/shared" +
                                std::to_string(shared) + "/priv" + std::to_string(priv);
  if (!ctx.wants(base_name + "/decode") && !ctx.wants(base_name + "/share")) return;
  const int32_t sp = shared / int32_t(kPageSize);  // shared full pages
  const int32_t pp = (priv + int32_t(kPageSize) - 1) / int32_t(kPageSize);
  const int64_t num_pages = sp + int64_t(batch) * pp;
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(7));
  std::vector<int32_t> indptr{0}, indices, last, lens;
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t i = 0; i < sp; ++i) indices.push_back(perm[i]);
    for (int32_t i = 0; i < pp; ++i) indices.push_back(perm[sp + int64_t(b) * pp + i]);
    indptr.push_back(int32_t(indices.size()));
    lens.push_back(shared + priv);
    last.push_back(priv - (pp - 1) * int32_t(kPageSize));
  }
  const double unique_kv = kv_bytes_of(m, double(shared) + double(batch) * priv);
  const size_t pool = size_t(num_pages) * kPageSize * m.hkv * m.d;
  DeviceArray k(pool * 2), v(pool * 2), q(size_t(batch) * m.hq * m.d * 2), out(size_t(batch) * m.hq * m.d * 2);
  weft::bench::fill_random(k.get(), pool, weft::DType::kBFloat16, 1);
  weft::bench::fill_random(v.get(), pool, weft::DType::kBFloat16, 2);
  weft::bench::fill_random(q.get(), size_t(batch) * m.hq * m.d, weft::DType::kBFloat16, 3);
  DeviceArray d_indptr(indptr.size() * 4), d_indices(indices.size() * 4), d_last(last.size() * 4);
  WEFT_BENCH_CUDA(cudaMemcpy(d_indptr.get(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  WEFT_BENCH_CUDA(cudaMemcpy(d_indices.get(), indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));
  WEFT_BENCH_CUDA(cudaMemcpy(d_last.get(), last.data(), last.size() * 4, cudaMemcpyHostToDevice));
  weft::PageTable table;
  table.batch_size = batch;
  table.indptr = {d_indptr.as<int32_t>(), indptr.data(), batch + 1};
  table.indices = {d_indices.as<int32_t>(), indices.data(), int64_t(indices.size())};
  table.last_page_len = {d_last.as<int32_t>(), last.data(), batch};
  weft::PagedKVCache cache;
  cache.layout = weft::KVLayout::kNHD;
  cache.k_pages = weft::TensorView(k.get(), weft::DType::kBFloat16, {num_pages, kPageSize, m.hkv, m.d});
  cache.v_pages = weft::TensorView(v.get(), weft::DType::kBFloat16, {num_pages, kPageSize, m.hkv, m.d});
  const weft::TensorView tq(q.get(), weft::DType::kBFloat16, {batch, m.hq, m.d});
  const weft::TensorView tout(out.get(), weft::DType::kBFloat16, {batch, m.hq, m.d});
  double decode_ms = 0;
  for (bool share : {false, true}) {
    weft::bench::Result r;
    r.name = base_name + (share ? "/share" : "/decode");
    r.params = {{"model", m.name}, {"batch", std::to_string(batch)}, {"shared", std::to_string(shared)},
                {"private", std::to_string(priv)}};
    r.bytes = unique_kv + 2.0 * batch * m.hq * m.d * 2;
    r.flops = 4.0 * double(shared + priv) * batch * m.hq * m.d;
    r.ceiling = "read";
    try {
      weft::DecodeOptions opt;
      opt.share_prefixes = share;
      const size_t ws_bytes = weft::BatchDecodeWrapper::workspace_size(batch, m.hq, m.hkv, m.d, opt);
      DeviceArray ws(ws_bytes);
      weft::BatchDecodeWrapper w(batch, m.hq, m.hkv, m.d, opt);
      cudaStream_t s = ctx.stream();
      w.plan(table, m.hq, m.hkv, m.d, kPageSize, weft::DType::kBFloat16, weft::KVLayout::kNHD, {}, ws.get(),
             ws_bytes, s);
      WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
      with_graph(ctx, [&](cudaStream_t st) { w.run(tq, cache, table, tout, nullptr, st); },
                 [&](const LaunchFn& launch) {
                   ctx.warm_up_once(launch);
                   r.ms = ctx.time_ms(launch);
                 });
      r.extra = {{"items", double(w.plan_info().num_items)}, {"packs", double(w.plan_info().num_packs)}};
      if (!share) decode_ms = r.ms;
      if (share && decode_ms > 0) {
        r.extra.push_back({"speedup_vs_decode", decode_ms / r.ms});
        if (ctx.ceilings().read_gbps > 0)
          r.extra.push_back({"unique_fraction_of_ceiling", r.bytes / (r.ms * 1e-3) / 1e9 / ctx.ceilings().read_gbps});
      }
      ctx.report(r);
    } catch (const std::exception& e) {
      ctx.report_error(r, e.what());
    }
  }
}
}  // namespace

WEFT_BENCH_GROUP(decode) {
  const Model models[] = {{"llama3-8b", 32, 8}, {"llama2-7b", 32, 32}};
  std::vector<int32_t> batches = {1, 8, 32, 128, 256};
  std::vector<int32_t> kvs = {1024, 4096, 16384, 32768, 131072};
  if (ctx.quick()) {
    batches = {1, 32, 128};
    kvs = {4096, 32768};
  }
  for (const Model& m : models)
    for (int32_t b : batches)
      for (int32_t kv : kvs) {
        if (kv_bytes_of(m, double(b) * kv) > kMaxKVBytes) continue;
        run_decode_case(ctx, row_name("decode/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv));
      }
  // plan() host-time rows at batch 1 and 256 in every mode (extra plan_us / plan_b2b_us; the
  // plain rows above have them too, b256 only in full runs): "decode/plan/<model>/b<B>/kv4096".
  {
    CaseOptions one;
    one.allocations = 1;
    for (int32_t b : {1, 256})
      run_decode_case(ctx, row_name("decode/plan/", models[0].name, b, 4096), models[0],
                      std::vector<int32_t>(b, 4096), one);
  }
  // Ragged bimodal (bimodal_lens).
  {
    const std::vector<int32_t> lens = bimodal_lens();
    run_decode_case(ctx, "decode/bimodal64", models[0], lens);
    CaseOptions seq;
    seq.shuffled_pages = false;
    run_decode_case(ctx, "decode/seqpages/bimodal64", models[0], lens, seq);
  }
  // Steady-state rows "decode/steady/...": the issue's target shapes (batch >= 32 at kv >= 4K,
  // batch 1 at kv >= 32K, the bimodal batch), timed as kSteadyRuns runs back to back in one graph
  // on rotated copies of the pools (CaseOptions::copies) after one L2 flush, i.e. as a serving
  // step's graph replays one layer after another: each run reads its KV from DRAM, but the
  // graph's launch (~4 us, decode/floor/launch) is shared by the runs instead of sitting in every
  // row. The main rows above keep the stricter one-run method; both go into the tables.
  // Skipped where the copies would take more than 40 GiB.
  {
    auto steady_row = [&](const std::string& name, const Model& m, const std::vector<int32_t>& lens) {
      const double kv_bytes = kv_bytes_of(m, std::accumulate(lens.begin(), lens.end(), 0.0));
      CaseOptions o;
      o.copies = steady_copies(kv_bytes, double(ctx.l2_bytes()));
      if (o.copies * kv_bytes > kMaxSteadyBytes) return;
      run_decode_case(ctx, name, m, lens, o);
    };
    for (const Model& m : models)
      for (int32_t b : batches)
        for (int32_t kv : kvs)
          if ((b >= 32 && kv >= 4096) || (b == 1 && kv >= 32768))
            steady_row(row_name("decode/steady/", m.name, b, kv), m,
                       std::vector<int32_t>(b, kv));
    const std::vector<int32_t> lens = bimodal_lens();
    steady_row("decode/steady/bimodal64", models[0], lens);
  }
  // Target shapes with each request's pages in pool order ("seqpages": a fresh cache) instead of
  // a random permutation of the pool (a fragmented cache, the main rows).
  {
    const std::pair<int32_t, int32_t> seq_shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}, {32, 32768}};
    CaseOptions seq;
    seq.shuffled_pages = false;
    for (const Model& m : models)
      for (auto [b, kv] : seq_shapes)
        run_decode_case(ctx, row_name("decode/seqpages/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv), seq);
  }
  // HND pages ([page][head][slot][dim]: a head's 16 keys are one contiguous 4 KB run instead of
  // 16 rows of 256 B at the NHD token stride) at the target shapes, kAuto path.
  {
    const std::pair<int32_t, int32_t> hnd_shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}, {32, 32768}};
    CaseOptions hnd;
    hnd.layout = weft::KVLayout::kHND;
    for (const Model& m : models)
      for (auto [b, kv] : hnd_shapes)
        run_decode_case(ctx, row_name("decode/hnd/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv), hnd);
  }
  // "<prefix>{tc,cc}/<model>/b<B>/kv<KV>": both kernel paths forced, for kAuto's choice
  // (choose_decode_path).
  auto forced_path_rows = [&](const std::string& prefix, const auto& path_models, const auto& path_shapes) {
    for (const Model& m : path_models)
      for (auto [b, kv] : path_shapes)
        for (auto [tag, path] : {std::pair{"tc", weft::DecodePath::kTensorCore}, std::pair{"cc", weft::DecodePath::kCudaCore}}) {
          CaseOptions forced;
          forced.path = path;
          run_decode_case(ctx, row_name(prefix + tag + "/", m.name, b, kv), m,
                          std::vector<int32_t>(b, kv), forced);
        }
  };
  // D128 at a few shapes, GQA groups 1 (llama2), 2, 4 (llama3-8b), 8 (llama3-70b heads).
  {
    const Model path_models[] = {{"llama2-7b", 32, 32}, {"g2-16x8", 16, 8}, {"llama3-8b", 32, 8},
                                 {"llama3-70b", 64, 8}};
    const std::pair<int32_t, int32_t> path_shapes[] = {{1, 32768}, {32, 4096}, {32, 16384}, {128, 4096}};
    forced_path_rows("decode/path/", path_models, path_shapes);
  }
  // Head dims 64 and 256 ("decode/hdim/..."): GQA group 4 (a Llama-3.2-1B-like 32/8 at D64) and
  // group 2 (a Gemma-2-9B-like 16/8 at D256), for the stage counts of decode_stages() at those dims;
  // and both paths forced at groups 1, 2 and 4 ("decode/hdim/path/...").
  {
    const Model hdim_models[] = {{"d64-32x8", 32, 8, 64}, {"d256-16x8", 16, 8, 256}};
    const std::pair<int32_t, int32_t> hdim_shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}};
    for (const Model& m : hdim_models)
      for (auto [b, kv] : hdim_shapes)
        run_decode_case(ctx, row_name("decode/hdim/", m.name, b, kv),
                        m, std::vector<int32_t>(b, kv), CaseOptions{});
    const Model hdim_path_models[] = {{"d64-16x16", 16, 16, 64},  {"d64-16x8", 16, 8, 64},   {"d64-32x8", 32, 8, 64},
                                      {"d256-16x16", 16, 16, 256}, {"d256-16x8", 16, 8, 256}, {"d256-32x8", 32, 8, 256}};
    forced_path_rows("decode/hdim/path/", hdim_path_models, hdim_shapes);
  }
  // GQA groups above the 16-row query tile ("decode/gqa/g<G>-<Hq>x<Hkv>/..."): MQA-like groups 24,
  // 32 and 64, each (request, kv head) cut into ceil(G / 16) row tiles that read the same keys
  // (dealt to neighbouring CTAs, balance_config's row_tiles_together); group 16 as the control.
  // Bytes count every KV byte ONCE, so the fraction of the read ceiling is on unique bytes.
  {
    const Model gqa_models[] = {{"g16-32x2", 32, 2}, {"g24-48x2", 48, 2}, {"g32-32x1", 32, 1},
                                {"g32-64x2", 64, 2}, {"g64-64x1", 64, 1}};
    const std::pair<int32_t, int32_t> gqa_shapes[] = {{1, 32768}, {32, 4096},   {32, 16384},
                                                      {32, 32768}, {128, 4096}, {128, 16384}};
    for (const Model& m : gqa_models)
      for (auto [b, kv] : gqa_shapes)
        if (kv_bytes_of(m, double(b) * kv) <= kMaxKVBytes)
          run_decode_case(ctx, row_name("decode/gqa/", m.name, b, kv), m, std::vector<int32_t>(b, kv));
  }
  // fp8 KV ("decode/fp8/{bf16,e4m3,e5m2}/<model>/b<B>/kv<KV>", "decode/fp8/*/bimodal64"): the bf16
  // row of each shape first, then the fp8 rows (extra.speedup_vs_bf16 against it). A subset of the
  // main grid: batch 1 long contexts, the target region (batch >= 32 at kv >= 4K) and batch 256.
  {
    const std::pair<int32_t, int32_t> fp8_shapes[] = {{1, 4096},     {1, 32768},   {1, 131072}, {8, 16384},
                                                      {32, 4096},    {32, 16384},  {32, 32768}, {128, 4096},
                                                      {128, 16384},  {256, 1024},  {256, 4096}, {256, 16384}};
    auto fp8_rows = [&](const std::string& tail, const Model& m, const std::vector<int32_t>& lens) {
      CaseOptions o16;
      const double ms16 = run_decode_case(ctx, "decode/fp8/bf16/" + tail, m, lens, o16);
      for (auto [tag, dt] : {std::pair{"e4m3", weft::DType::kFloat8E4M3}, std::pair{"e5m2", weft::DType::kFloat8E5M2}}) {
        CaseOptions o8;
        o8.kv_dtype = dt;
        o8.bf16_ms = ms16;
        run_decode_case(ctx, std::string("decode/fp8/") + tag + "/" + tail, m, lens, o8);
      }
      // e4m3 with each path forced ("decode/fp8/e4m3-tc/...", "e4m3-cc"): what kAuto's choice for
      // fp8 pools is measured against (heuristics.cpp decode_path).
      for (auto [tag, path] : {std::pair{"e4m3-tc", weft::DecodePath::kTensorCore}, std::pair{"e4m3-cc", weft::DecodePath::kCudaCore}}) {
        CaseOptions o8;
        o8.kv_dtype = weft::DType::kFloat8E4M3;
        o8.path = path;
        o8.bf16_ms = ms16;
        run_decode_case(ctx, std::string("decode/fp8/") + tag + "/" + tail, m, lens, o8);
      }
    };
    for (const Model& m : models)
      for (auto [b, kv] : fp8_shapes)
        if (kv_bytes_of(m, double(b) * kv) <= kMaxKVBytes)
          fp8_rows(std::string(m.name) + "/b" + std::to_string(b) + "/kv" + std::to_string(kv), m,
                   std::vector<int32_t>(b, kv));
    fp8_rows("bimodal64", models[0], bimodal_lens());
  }
  // Prefix sharing ("decode/prefix/..."): a shared system prompt of S keys and P private keys per
  // request, standard decode against DecodeOptions::share_prefixes (run_prefix_case).
  for (const Model& m : models)
    for (auto [b, shared, priv] : {std::tuple{32, 4096, 256}, std::tuple{64, 4096, 128}, std::tuple{128, 2048, 512},
                                   std::tuple{16, 8192, 1024}})
      run_prefix_case(ctx, m, b, shared, priv);
  // CTA shape variants (weft::DecodeOptions::warps_per_cta / pipeline_stages): "decode/w<W>s<S>/..."
  // at a few shapes, to tune the defaults (decode_warps() / decode_stages()).
  const std::pair<int32_t, int32_t> shapes[] = {{1, 32768}, {32, 4096}, {128, 4096}, {32, 32768}};
  // (w4s3: the D128 stage count before change 14, the same-process comparison for the default S = 2.)
  const std::pair<int, int> variants[] = {{8, 3}, {4, 2}, {4, 3}};
  CaseOptions single;  // tuning rows: one allocation each
  single.allocations = 1;
  for (auto [warps, stages] : variants) {
    const std::string tag = "decode/w" + std::to_string(warps) + "s" + std::to_string(stages) + "/";
    CaseOptions tuned = single;
    tuned.warps = warps;
    tuned.stages = stages;
    for (const Model& m : models)
      for (auto [b, kv] : shapes)
        run_decode_case(ctx, row_name(tag, m.name, b, kv), m,
                        std::vector<int32_t>(b, kv), tuned);
  }
  // "decode/kvinterleaved/..." and "decode/kvoffset/...": the V pool placed differently relative
  // to the K pool (CaseOptions::placement), 5 allocations each, at the shapes whose rows showed
  // two speed modes across allocations.
  {
    const std::pair<int32_t, int32_t> shapes_kv[] = {{1, 32768}, {1, 131072}, {32, 4096}};
    const std::pair<const char*, CaseOptions::KVPlacement> placements[] = {
        {"kvseparate", CaseOptions::KVPlacement::kSeparate},
        {"kvinterleaved", CaseOptions::KVPlacement::kInterleaved},
        {"kvoffset", CaseOptions::KVPlacement::kOffset}};
    for (auto [tag, placement] : placements)
      for (const Model& m : models)
        for (auto [b, kv] : shapes_kv) {
          CaseOptions o;
          o.placement = placement;
          o.allocations = 5;
          run_decode_case(ctx, row_name(std::string("decode/") + tag + "/", m.name, b, kv),
                          m, std::vector<int32_t>(b, kv), o);
        }
  }
  // "decode/floor/...": the best plain streaming-read kernel over the same KV bytes, timed the
  // same way (one launch after an L2 flush; weft::bench::plain_read_ms). The fixed cost of one
  // launch and its ramp is in it too, so it shows what fraction of the read ceiling any single
  // kernel of that size reaches here: the reachable top for the decode row of the same shape.
  for (const Model& m : models)
    for (auto [b, kv] : {std::pair{1, 16384}, std::pair{1, 32768}, std::pair{1, 131072}, std::pair{32, 4096}})
      report_plain_read(ctx, row_name("decode/floor/", m.name, b, kv),
                        {{"model", m.name}, {"batch", std::to_string(b)}, {"kv_len", std::to_string(kv)}},
                        kv_bytes_of(m, double(b) * kv));
  for (int kb : {0, 100}) report_launch_overhead(ctx, kb * 1024);
  // "decode/floor/steady/...": the same plain read timed as the steady-state decode rows are
  // (kSteadyRuns reads back to back in one graph on rotated copies), for those rows' fraction.
  for (const Model& m : models)
    for (auto [b, kv] : {std::pair{1, 32768}, std::pair{32, 4096}}) {
      const double bytes = kv_bytes_of(m, double(b) * kv);
      report_plain_read(ctx, row_name("decode/floor/steady/", m.name, b, kv),
                        {{"model", m.name}, {"batch", std::to_string(b)}, {"kv_len", std::to_string(kv)}}, bytes, 0,
                        steady_copies(bytes, double(ctx.l2_bytes())), kSteadyRuns);
    }
  // "decode/floor/spacer<i>/<MB>": the same plain read with a spacer of i x (1 GiB + 6 MiB)
  // allocated first (as run_decode_case's allocation i does), to see whether the speed modes of
  // the decode rows across allocations also show for a plain read.
  for (int i = 0; i < 6; ++i)
    for (int mib : {128, 512})
      report_plain_read(ctx, "decode/floor/spacer" + std::to_string(i) + "/" + std::to_string(mib) + "MiB",
                        {{"spacer_bytes", std::to_string(spacer_bytes(i))}}, double(mib) * (1 << 20), i);
  // "decode/marginal/...": ms = time(2 runs in one graph) - time(1 run), the steady-state cost
  // of a run without the launch latency and with warm address translations (run_decode_case).
  for (const Model& m : models)
    for (auto [b, kv] : shapes)
      run_decode_case(ctx, row_name("decode/marginal/", m.name, b, kv),
                      m, std::vector<int32_t>(b, kv), single);
}
