// Bench group "pod": hybrid batches (one prefill chunk with its history + a batch of decodes on one
// paged cache), the POD-Attention paper's sweep: Llama-3-8B (32/8), Llama-2-7B (32/32) and Yi-6B
// (32/4) heads, d128 bf16, page 16, context 4K..20K (every request of a batch has that context:
// the chunk is the last `chunk` tokens of its sequence), chunk 512/1K/2K, decode batch 8..256.
// Every timed run follows an L2 flush (Context::time_ms), page ids are random over a pool of
// ~2 x 6 GB.
//
// Per batch: the prefill alone with both mainloops (sm90 where eligible, FA2) and the decode
// alone; batches where either side takes < 20% of the serial time are skipped (counted in the
// summary). Kept batches time, in the same process:
//   serial      fastest prefill then decode on one stream (two launches + the prefill merge)
//   two_stream  prefill and decode forked on two streams (events)
//   batched     every request through the prefill kernel (decodes as 1-token chunks)
//   pod         BatchPODAttention, PodMode::kAuto (the product: fused, SM partition or serial)
//   partition   PodMode::kPartition with the planner's k, and pinned at k = 16, 32, 48, 64 (the
//               sweep that measures the partition's bands: heuristics::pod_partition_*), or at the
//               k of WEFT_BENCH_POD_K=k[,k..] (read by the bench only; multiples of 8 up to 64)
//   alt<i>_*    with WEFT_BENCH_POD_DECODE=WxS[,WxS..] (read by the bench only): for each decode
//               CTA shape i, kAuto (interleaved too) and the partition pinned at the swept k
//               with PodOptions::partition_decode_warps = W and _stages = S (the partition's
//               decode only; serial keeps the default shape)
//   fused       PodMode::kFused, proportional binding (the 50:50 / static / split ablations and
//               the fused kernel's halves were measured at 6d33c1b and 76f083f and are not re-timed)
// serial, pod, partition (planner's k) and fused are timed INTERLEAVED (4 rounds of 5 runs each,
// medians over the 20): a comparison of the same kernels timed one after the other drifted by up
// to 10% at the heavy rows (GPU clocks under sustained tensor-core load), more than the gains.
// Case "pod/<model>/ctx<C>/chunk<c>/b<B>": ms = pod; extra.speedup_vs_serial = serial / pod,
// extra.ideal_bound_ratio = pod / max(prefill, decode) (1 = perfect overlap), the other times.
// Case "pod/summary": the means over kept batches (issue 28's Results format).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "pod/pod_plan.h"
#include "weft/decode.h"
#include "weft/error.h"
#include "weft/pod.h"
#include "weft/prefill.h"

namespace {

using weft::bench::DeviceArray;
constexpr weft::DType kBF16 = weft::DType::kBFloat16;
constexpr int32_t kD = 128, kPage = 16, kMaxChunk = 2048, kMaxDec = 256;

struct Model {
  const char* name;
  int32_t hq, hkv;
};

// Device page table of one set of requests (host mirrors kept).
struct Table {
  std::vector<int32_t> indptr{0}, indices, last;
  DeviceArray d_indptr, d_indices, d_last;
  weft::PageTable t;
  void build(const std::vector<int32_t>& kv, int32_t pool_pages, std::mt19937_64& rng) {
    indptr.assign(1, 0);
    indices.clear();
    last.clear();
    std::uniform_int_distribution<int32_t> pick(0, pool_pages - 1);
    for (int32_t l : kv) {
      const int32_t pages = (l + kPage - 1) / kPage;
      for (int32_t p = 0; p < pages; ++p) indices.push_back(pick(rng));
      indptr.push_back(static_cast<int32_t>(indices.size()));
      last.push_back(l == 0 ? 0 : l - (pages - 1) * kPage);
    }
    d_indptr = DeviceArray(indptr.size() * 4);
    d_indices = DeviceArray(std::max<size_t>(indices.size(), 1) * 4);
    d_last = DeviceArray(std::max<size_t>(last.size(), 1) * 4);
    WEFT_BENCH_CUDA(cudaMemcpy(d_indptr.get(), indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
    WEFT_BENCH_CUDA(cudaMemcpy(d_indices.get(), indices.data(), indices.size() * 4, cudaMemcpyHostToDevice));
    WEFT_BENCH_CUDA(cudaMemcpy(d_last.get(), last.data(), last.size() * 4, cudaMemcpyHostToDevice));
    t.batch_size = static_cast<int32_t>(kv.size());
    t.indptr = {d_indptr.as<int32_t>(), indptr.data(), int64_t(indptr.size())};
    t.indices = {d_indices.as<int32_t>(), indices.data(), int64_t(indices.size())};
    t.last_page_len = {d_last.as<int32_t>(), last.data(), int64_t(last.size())};
  }
};

// WEFT_BENCH_POD_DECODE=WxS[,WxS..] (a bench-only knob, like WEFT_COMMIT): decode CTA shapes
// (warps x per-warp stages) the pod group also times as the SM partition's decode
// (PodOptions::partition_decode_warps / _stages); unset or empty: none. Malformed: weft::Error.
std::vector<std::pair<int, int>> pod_decode_shapes() {
  std::vector<std::pair<int, int>> out;
  const char* env = std::getenv("WEFT_BENCH_POD_DECODE");
  if (env == nullptr || *env == '\0') return out;
  const std::string v(env);
  std::size_t at = 0;
  while (at <= v.size()) {
    const std::size_t end = std::min(v.find(',', at), v.size());
    int w = 0, st = 0;
    char tail = 0;
    if (std::sscanf(v.substr(at, end - at).c_str(), "%dx%d%c", &w, &st, &tail) != 2)
      throw weft::Error("WEFT_BENCH_POD_DECODE", "expected WxS[,WxS..] (e.g. 4x3,2x6), got '" + v + "'");
    out.emplace_back(w, st);
    at = end + 1;
  }
  return out;
}

// WEFT_BENCH_POD_K=k[,k..] (a bench-only knob): the k the partition is pinned at (extra
// part_k<k>_ms, alt<i>_k<k>_ms); unset or empty: 16, 32, 48, 64. Malformed: weft::Error (a k that
// is not a partition candidate is rejected by the wrapper's plan, reported per case).
std::vector<int32_t> pod_sweep_k() {
  const char* env = std::getenv("WEFT_BENCH_POD_K");
  if (env == nullptr || *env == '\0') return {16, 32, 48, 64};
  std::vector<int32_t> out;
  const std::string v(env);
  std::size_t at = 0;
  while (at <= v.size()) {
    const std::size_t end = std::min(v.find(',', at), v.size());
    int k = 0;
    char tail = 0;
    if (std::sscanf(v.substr(at, end - at).c_str(), "%d%c", &k, &tail) != 1 || k <= 0)
      throw weft::Error("WEFT_BENCH_POD_K", "expected k[,k..] (e.g. 16,24,32), got '" + v + "'");
    out.push_back(k);
    at = end + 1;
  }
  return out;
}

struct Summary {
  int kept = 0, skipped = 0, fused = 0;
  double sum_speedup = 0, min_speedup = 1e30, within10 = 0, sum_ideal_speedup = 0;
  double sum_fused = 0, sum_part = 0, sum_two = 0, sum_batched = 0, sum_best_k = 0;
  int partition = 0;
  // Per WEFT_BENCH_POD_DECODE shape: kAuto's mean / min speedup over serial, and the pinned-k oracle's mean.
  std::vector<double> alt_sum, alt_min, alt_best_k;
};

void run_model(weft::bench::Context& ctx, const Model& m, Summary& sum) {
  // --filter on a model prefix (or on some of its cases, e.g. pod/<model>/ctx8192/): skip the
  // other models' pool allocation too.
  if (!ctx.wants(std::string("pod/") + m.name + "/ctx4096/chunk512/b8") &&
      !ctx.filter_names(std::string("pod/") + m.name + "/"))
    return;
  cudaStream_t s = ctx.stream();
  // Pool: ~6 GB per K and V (random page ids over it; longer batches reuse ids at random).
  const int64_t page_elems = int64_t(kPage) * m.hkv * kD;
  const int32_t pool_pages = static_cast<int32_t>((6LL << 30) / (page_elems * 2));
  DeviceArray k(size_t(pool_pages) * page_elems * 2), v(size_t(pool_pages) * page_elems * 2);
  weft::bench::fill_random(k.get(), size_t(pool_pages) * page_elems, kBF16, 11);
  weft::bench::fill_random(v.get(), size_t(pool_pages) * page_elems, kBF16, 12);
  weft::PagedKVCache cache;
  cache.layout = weft::KVLayout::kNHD;
  cache.k_pages = weft::TensorView(k.get(), kBF16, {pool_pages, kPage, m.hkv, kD});
  cache.v_pages = weft::TensorView(v.get(), kBF16, {pool_pages, kPage, m.hkv, kD});

  const size_t row = size_t(m.hq) * kD;
  DeviceArray q_all((kMaxChunk + kMaxDec) * row * 2), o_all((kMaxChunk + kMaxDec) * row * 2);
  weft::bench::fill_random(q_all.get(), (kMaxChunk + kMaxDec) * row, kBF16, 13);
  // Prefill rows first, decode rows after them: the batched variant reads both as one ragged batch.
  char* qp = static_cast<char*>(q_all.get());
  char* op = static_cast<char*>(o_all.get());

  weft::PrefillBounds pb;
  pb.max_batch = 1;
  pb.max_total_q = kMaxChunk;
  pb.num_qo_heads = m.hq;
  pb.num_kv_heads = m.hkv;
  pb.head_dim = kD;
  weft::PrefillBounds bb = pb;
  bb.max_batch = 1 + kMaxDec;
  bb.max_total_q = kMaxChunk + kMaxDec;
  DeviceArray ws_p(weft::BatchPrefillWrapper::workspace_size(pb)), ws_f(weft::BatchPrefillWrapper::workspace_size(pb));
  DeviceArray ws_b(weft::BatchPrefillWrapper::workspace_size(bb));
  DeviceArray ws_d(weft::BatchDecodeWrapper::workspace_size(kMaxDec, m.hq, m.hkv, kD));
  weft::BatchPrefillWrapper pre, pre_fa2, batched;
  weft::BatchDecodeWrapper dec(kMaxDec, m.hq, m.hkv, kD);
  weft::PodBounds podb;
  podb.max_prefill_batch = 1;
  podb.max_prefill_tokens = kMaxChunk;
  podb.max_decode_batch = kMaxDec;
  podb.num_qo_heads = m.hq;
  podb.num_kv_heads = m.hkv;
  podb.head_dim = kD;
  // Two POD workspaces: pod (auto) and fused (proportional) keep their plans for the interleaved
  // timing; the other variants re-plan into the second one.
  DeviceArray ws_pod(weft::BatchPODAttention::workspace_size(podb)), ws_pod2(weft::BatchPODAttention::workspace_size(podb));
  auto pod_with = [&](weft::PodMode mode, weft::PodBinding b, bool split = false) {
    weft::PodOptions o;
    o.mode = mode;
    o.binding = b;
    o.prefill_split = split;
    return std::make_unique<weft::BatchPODAttention>(podb, o);
  };
  auto pod_auto = pod_with(weft::PodMode::kAuto, weft::PodBinding::kProportional);
  auto pod_prop = pod_with(weft::PodMode::kFused, weft::PodBinding::kProportional);
  auto pod_part = pod_with(weft::PodMode::kPartition, weft::PodBinding::kProportional);
  // The partition pinned at each swept k (PodOptions::partition_free_sms).
  const std::vector<int32_t> kSweep = pod_sweep_k();
  const std::size_t nk = kSweep.size();
  std::vector<std::unique_ptr<weft::BatchPODAttention>> pod_k;
  for (int32_t k : kSweep) {
    weft::PodOptions o;
    o.mode = weft::PodMode::kPartition;
    o.partition_free_sms = k;
    pod_k.push_back(std::make_unique<weft::BatchPODAttention>(podb, o));
  }
  DeviceArray ws_pod3(weft::BatchPODAttention::workspace_size(podb));
  // WEFT_BENCH_POD_DECODE shapes: kAuto and the pinned k with the partition's decode at W warps x S stages;
  // each kAuto keeps its plan in its own workspace (interleaved timing), the pinned ones re-plan
  // into ws_alt_k.
  const std::vector<std::pair<int, int>> shapes = pod_decode_shapes();
  std::vector<std::unique_ptr<weft::BatchPODAttention>> alt_auto;
  std::vector<std::vector<std::unique_ptr<weft::BatchPODAttention>>> alt_k(shapes.size());
  std::vector<DeviceArray> ws_alt;
  std::size_t alt_k_bytes = 1;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    weft::PodOptions o;
    o.partition_decode_warps = shapes[i].first;
    o.partition_decode_stages = shapes[i].second;
    alt_auto.push_back(std::make_unique<weft::BatchPODAttention>(podb, o));
    ws_alt.emplace_back(weft::BatchPODAttention::workspace_size(podb, o));
    o.mode = weft::PodMode::kPartition;
    for (int32_t k : kSweep) {
      o.partition_free_sms = k;
      alt_k[i].push_back(std::make_unique<weft::BatchPODAttention>(podb, o));
      alt_k_bytes = std::max(alt_k_bytes, weft::BatchPODAttention::workspace_size(podb, o));
    }
  }
  DeviceArray ws_alt_k(alt_k_bytes);
  sum.alt_sum.resize(shapes.size(), 0.0);
  sum.alt_min.resize(shapes.size(), 1e30);
  sum.alt_best_k.resize(shapes.size(), 0.0);
  cudaStream_t s2;
  cudaEvent_t fork, join;
  WEFT_BENCH_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  WEFT_BENCH_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  WEFT_BENCH_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  weft::AttentionVariant var;
  var.mask = weft::MaskMode::kCausal;
  weft::PrefillPlanOptions fa2;
  fa2.mainloop = weft::PrefillMainloop::kFA2;
  std::mt19937_64 rng(std::hash<std::string>{}(m.name));

  const std::vector<int32_t> contexts = ctx.quick() ? std::vector<int32_t>{8192, 16384}
                                                    : std::vector<int32_t>{4096, 8192, 12288, 16384, 20480};
  const std::vector<int32_t> chunks = {512, 1024, 2048};
  const std::vector<int32_t> batches = ctx.quick() ? std::vector<int32_t>{32, 128}
                                                   : std::vector<int32_t>{8, 16, 32, 64, 128, 256};
  for (int32_t context : contexts)
    for (int32_t chunk : chunks)
      for (int32_t nb : batches) {
        weft::bench::Result r;
        r.name = std::string("pod/") + m.name + "/ctx" + std::to_string(context) + "/chunk" + std::to_string(chunk) +
                 "/b" + std::to_string(nb);
        if (!ctx.wants(r.name)) continue;
        r.params = {{"model", m.name}, {"context", std::to_string(context)}, {"chunk", std::to_string(chunk)},
                    {"decode_batch", std::to_string(nb)}, {"heads", std::to_string(m.hq) + "/" + std::to_string(m.hkv)}};
        try {
          Table tp, td, tb, te;
          te.build({}, pool_pages, rng);  // an empty side (the fused kernel's halves)
          tp.build({context}, pool_pages, rng);
          td.build(std::vector<int32_t>(nb, context), pool_pages, rng);
          // Batched: the chunk and the decodes as one ragged prefill batch over both page lists.
          std::vector<int32_t> all_kv(1, context);
          all_kv.insert(all_kv.end(), nb, context);
          tb.build(all_kv, pool_pages, rng);
          std::vector<int32_t> qo_p{0, chunk}, qo_b{0, chunk};
          for (int32_t i = 0; i < nb; ++i) qo_b.push_back(chunk + i + 1);
          const weft::TensorView pq(qp, kBF16, {chunk, m.hq, kD}), po(op, kBF16, {chunk, m.hq, kD});
          const weft::TensorView dq(qp + chunk * row * 2, kBF16, {nb, m.hq, kD});
          const weft::TensorView dout(op + chunk * row * 2, kBF16, {nb, m.hq, kD});
          const weft::TensorView bq(qp, kBF16, {chunk + nb, m.hq, kD}), bo(op, kBF16, {chunk + nb, m.hq, kD});

          pre.plan_paged(qo_p.data(), tp.t, kPage, m.hq, m.hkv, kD, kBF16, var, ws_p.get(), ws_p.bytes(), pb, s);
          pre_fa2.plan_paged(qo_p.data(), tp.t, kPage, m.hq, m.hkv, kD, kBF16, var, ws_f.get(), ws_f.bytes(), pb, s,
                             nullptr, fa2);
          dec.plan(td.t, m.hq, m.hkv, kD, kPage, kBF16, weft::KVLayout::kNHD, var, ws_d.get(), ws_d.bytes(), s);
          auto run_pre = [&](cudaStream_t st) { pre.run_paged(pq, cache, tp.t, po, nullptr, st); };
          auto run_fa2 = [&](cudaStream_t st) { pre_fa2.run_paged(pq, cache, tp.t, po, nullptr, st); };
          auto run_dec = [&](cudaStream_t st) { dec.run(dq, cache, td.t, dout, nullptr, st); };
          ctx.warm_up_once([&](cudaStream_t st) { run_pre(st); run_dec(st); });
          // Screening times (fewer runs): a batch off the 20..80% band is not timed further.
          const double t_sm90 = ctx.time_ms(run_pre, 2, 10), t_fa2 = ctx.time_ms(run_fa2, 2, 10),
                       t_d = ctx.time_ms(run_dec, 2, 10);
          const bool use_fa2 = t_fa2 < t_sm90;
          const double t_p = std::min(t_sm90, t_fa2);
          const double share_p = t_p / (t_p + t_d);
          if (share_p < 0.2 || share_p > 0.8) {
            ++sum.skipped;
            continue;
          }
          auto run_fast_pre = [&](cudaStream_t st) { use_fa2 ? run_fa2(st) : run_pre(st); };
          const double t_two = ctx.time_ms([&](cudaStream_t st) {
            WEFT_BENCH_CUDA(cudaEventRecord(fork, st));
            WEFT_BENCH_CUDA(cudaStreamWaitEvent(s2, fork, 0));
            run_fast_pre(st);
            run_dec(s2);
            WEFT_BENCH_CUDA(cudaEventRecord(join, s2));
            WEFT_BENCH_CUDA(cudaStreamWaitEvent(st, join, 0));
          });
          batched.plan_paged(qo_b.data(), tb.t, kPage, m.hq, m.hkv, kD, kBF16, var, ws_b.get(), ws_b.bytes(), bb, s);
          const double t_batched = ctx.time_ms([&](cudaStream_t st) { batched.run_paged(bq, cache, tb.t, bo, nullptr, st); });
          const std::vector<int32_t> qo_none{0};
          const weft::TensorView nq(qp, kBF16, {0, m.hq, kD}), no(op, kBF16, {0, m.hq, kD});
          auto plan_pod = [&](weft::BatchPODAttention& pod, DeviceArray& ws, int sides = 3) {
            const bool pre_on = sides & 1, dec_on = sides & 2;
            const weft::PageTable* a = pre_on ? &tp.t : &te.t;  // pointers: the closure outlives this call
            const weft::PageTable* d = dec_on ? &td.t : &te.t;
            weft::BatchPODAttention* pp = &pod;
            pod.plan(pre_on ? qo_p.data() : qo_none.data(), *a, *d, kPage, kBF16, var, ws.get(), ws.bytes(), s);
            const weft::TensorView q1 = pre_on ? pq : nq, q2 = dec_on ? dq : nq, o1 = pre_on ? po : no,
                                   o2 = dec_on ? dout : no;
            const weft::PagedKVCache* c = &cache;
            return std::function<void(cudaStream_t)>([=](cudaStream_t st) {
              pp->run(q1, q2, *c, *a, *d, o1, o2, nullptr, nullptr, st);
            });
          };
          auto time_pod = [&](weft::BatchPODAttention& pod, int sides = 3) {
            return ctx.time_ms(plan_pod(pod, ws_pod2, sides));
          };
          std::vector<double> t_k(nk);
          for (std::size_t i = 0; i < nk; ++i) t_k[i] = time_pod(*pod_k[i]);
          std::vector<std::vector<double>> t_alt_k(shapes.size(), std::vector<double>(nk));
          for (std::size_t a = 0; a < shapes.size(); ++a)
            for (std::size_t i = 0; i < nk; ++i) t_alt_k[a][i] = ctx.time_ms(plan_pod(*alt_k[a][i], ws_alt_k));
          // Interleaved: serial, pod (auto), partition (planner's k), fused, then kAuto with each
          // WEFT_BENCH_POD_DECODE shape, round by round.
          std::vector<std::function<void(cudaStream_t)>> fns = {
              [&](cudaStream_t st) { run_fast_pre(st); run_dec(st); }, plan_pod(*pod_auto, ws_pod),
              plan_pod(*pod_part, ws_pod3), plan_pod(*pod_prop, ws_pod2)};
          for (std::size_t a = 0; a < shapes.size(); ++a) fns.push_back(plan_pod(*alt_auto[a], ws_alt[a]));
          const std::size_t nf = fns.size();
          const weft::PodPlanInfo info = pod_auto->plan_info();
          const weft::PodPlanInfo pinfo = pod_part->plan_info();
          const weft::PodPlanInfo finfo = pod_prop->plan_info();
          std::vector<std::vector<double>> samples(nf);
          for (int round = 0; round < 4; ++round)
            for (std::size_t f = 0; f < nf; ++f) {
              const std::vector<double> v = ctx.time_samples_ms(fns[f], round == 0 ? 3 : 1, 5);
              samples[f].insert(samples[f].end(), v.begin(), v.end());
            }
          auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            const std::size_t n = v.size();
            return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
          };
          const double t_serial = median(samples[0]), t_pod = median(samples[1]), t_part = median(samples[2]),
                       t_prop = median(samples[3]);
          std::size_t best = 0;
          for (std::size_t i = 1; i < nk; ++i) best = t_k[i] < t_k[best] ? i : best;
          const double ideal = std::max(t_p, t_d);
          r.ms = t_pod;
          double pairs = double(chunk) * (context - chunk) + double(chunk) * (chunk + 1) / 2;
          r.flops = 4.0 * kD * m.hq * pairs;
          r.bytes = 2.0 * kD * m.hkv * 2.0 * double(context) * (nb + 1);
          r.extra = {{"speedup_vs_serial", t_serial / t_pod},
                     {"ideal_bound_ratio", t_pod / ideal},
                     {"ideal_speedup", t_serial / ideal},
                     {"serial_ms", t_serial},
                     {"prefill_ms", t_p},
                     {"prefill_sm90_ms", t_sm90},
                     {"prefill_fa2_ms", t_fa2},
                     {"decode_ms", t_d},
                     {"two_stream_ms", t_two},
                     {"batched_ms", t_batched},
                     {"fused_ms", t_prop},
                     {"partition_ms", t_part},
                     {"partition_speedup_vs_serial", t_serial / t_part},
                     {"partition_free_sms", double(pinfo.free_sms)},
                     {"partition_prefill_grid", double(pinfo.prefill_grid)},
                     {"predicted_partition_us", pinfo.predicted_partition_us},
                     {"part_best_k", double(kSweep[best])},
                     {"fused_prefill_items", double(finfo.prefill_items)},
                     {"fused_speedup_vs_serial", t_serial / t_prop},
                     {"pod_fused", info.fused ? 1.0 : 0.0},
                     {"pod_partition", info.partition ? 1.0 : 0.0},
                     {"pod_free_sms", double(info.free_sms)},
                     {"pod_decode_warps", double(info.decode_warps)},
                     {"pod_decode_stages", double(info.decode_stages)},
                     {"fused_prefill_ctas", double(finfo.prefill_ctas)},
                     {"fused_decode_ctas", double(finfo.decode_ctas)},
                     {"ctas_per_sm", double(finfo.ctas_per_sm)},
                     {"predicted_serial_us", info.predicted_serial_us},
                     {"predicted_fused_us", info.predicted_fused_us},
                     {"prefill_share", share_p}};
          {  // The bands' inputs as the planner computes them (pod::partition_ratio, sm90_tiles):
             // a host replay of other bands on these rows (bench/pod_refit.py) reads them.
            weft::pod::PlanInput pin;
            pin.pre_qo_len = {chunk};
            pin.pre_kv_len = {context};
            pin.dec_kv_len.assign(nb, context);
            pin.num_qo_heads = m.hq;
            pin.num_kv_heads = m.hkv;
            pin.head_dim = kD;
            pin.num_sms = ctx.sm_count();
            r.extra.push_back({"partition_x", weft::pod::partition_ratio(pin)});
            r.extra.push_back({"sm90_tiles_per_sm", double(weft::pod::sm90_tiles(pin)) / ctx.sm_count()});
          }
          for (std::size_t i = 0; i < nk; ++i)
            r.extra.push_back({"part_k" + std::to_string(kSweep[i]) + "_ms", t_k[i]});
          for (std::size_t a = 0; a < shapes.size(); ++a) {
            const std::string pre = "alt" + std::to_string(a) + "_";
            const weft::PodPlanInfo ai = alt_auto[a]->plan_info();
            const double t_alt = median(samples[4 + a]);
            const double best_alt = *std::min_element(t_alt_k[a].begin(), t_alt_k[a].end());
            r.extra.push_back({pre + "decode_warps", double(shapes[a].first)});
            r.extra.push_back({pre + "decode_stages", double(shapes[a].second)});
            r.extra.push_back({pre + "pod_ms", t_alt});
            r.extra.push_back({pre + "speedup_vs_serial", t_serial / t_alt});
            r.extra.push_back({pre + "pod_partition", ai.partition ? 1.0 : 0.0});
            r.extra.push_back({pre + "pod_free_sms", double(ai.free_sms)});
            for (std::size_t i = 0; i < nk; ++i)
              r.extra.push_back({pre + "k" + std::to_string(kSweep[i]) + "_ms", t_alt_k[a][i]});
            sum.alt_sum[a] += t_serial / t_alt;
            sum.alt_min[a] = std::min(sum.alt_min[a], t_serial / t_alt);
            sum.alt_best_k[a] += t_serial / best_alt;
          }
          ctx.report(r);
          ++sum.kept;
          sum.fused += info.fused;
          sum.sum_speedup += t_serial / t_pod;
          sum.min_speedup = std::min(sum.min_speedup, t_serial / t_pod);
          sum.within10 += t_pod <= 1.10 * ideal;
          sum.sum_ideal_speedup += t_serial / ideal;
          sum.sum_fused += t_serial / t_prop;
          sum.sum_part += t_serial / t_part;
          sum.sum_best_k += t_serial / std::min(t_part, t_k[best]);
          sum.partition += info.partition;
          sum.sum_two += t_serial / t_two;
          sum.sum_batched += t_serial / t_batched;
        } catch (const weft::Error& e) {
          ctx.report_error(r, e.what());
        }
      }
  WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
  WEFT_BENCH_CUDA(cudaStreamDestroy(s2));
  WEFT_BENCH_CUDA(cudaEventDestroy(fork));
  WEFT_BENCH_CUDA(cudaEventDestroy(join));
}

}  // namespace

WEFT_BENCH_GROUP(pod) {
  const Model models[] = {{"llama3-8b", 32, 8}, {"llama2-7b", 32, 32}, {"yi-6b", 32, 4}};
  Summary sum;
  for (const Model& m : models) run_model(ctx, m, sum);
  weft::bench::Result r;
  r.name = "pod/summary";
  if (!ctx.wants(r.name) && sum.kept == 0) return;
  const double n = std::max(1, sum.kept);
  r.ms = 0;
  r.params = {{"batches_kept", std::to_string(sum.kept)}, {"batches_skipped", std::to_string(sum.skipped)}};
  r.extra = {{"mean_speedup_vs_serial", sum.sum_speedup / n},
             {"min_speedup_vs_serial", sum.kept ? sum.min_speedup : 0.0},
             {"share_within_10pct_of_ideal", sum.within10 / n},
             {"mean_ideal_speedup", sum.sum_ideal_speedup / n},
             {"share_fused", sum.fused / n},
             {"mean_fused_speedup_vs_serial", sum.sum_fused / n},
             {"share_partition", sum.partition / n},
             {"mean_partition_speedup_vs_serial", sum.sum_part / n},
             {"mean_partition_best_k_speedup_vs_serial", sum.sum_best_k / n},
             {"mean_two_stream_speedup_vs_serial", sum.sum_two / n},
             {"mean_batched_speedup_vs_serial", sum.sum_batched / n},
             {"batches_kept", double(sum.kept)},
             {"batches_skipped", double(sum.skipped)}};
  for (std::size_t a = 0; a < sum.alt_sum.size(); ++a) {
    const std::string pre = "alt" + std::to_string(a) + "_";
    r.extra.push_back({pre + "decode_warps", double(pod_decode_shapes()[a].first)});
    r.extra.push_back({pre + "decode_stages", double(pod_decode_shapes()[a].second)});
    r.extra.push_back({pre + "mean_speedup_vs_serial", sum.alt_sum[a] / n});
    r.extra.push_back({pre + "min_speedup_vs_serial", sum.kept ? sum.alt_min[a] : 0.0});
    r.extra.push_back({pre + "mean_best_k_speedup_vs_serial", sum.alt_best_k[a] / n});
  }
  ctx.report(r);
}

// Bench group "pod_decode": the decode kernel ALONE restricted to k SMs, per decode CTA shape --
// what the SM partition's decode side can read per SM while the prefill holds the other SMs,
// without the prefill's own HBM / L2 traffic. The other N - k SMs are held by an occupier kernel
// (one CTA per SM: the device's whole per-block shared memory, so no decode CTA fits beside it)
// that spins until the decode is done; a one-thread kernel on the decode's stream waits until
// every occupier CTA is resident before the start event, so the events bracket only the decode
// on the k free SMs (k = 16, 32, 48, 64 and N: no occupier). L2 flushed before every run; median of 7.
// Case "pod_decode/<model>/b<B>/ctx<C>/w<W>s<S>/k<k>": ms, bytes = K + V read, extra.gbps_per_sm
// = bytes / ms / k, extra.waves = the decode grid over the k SMs' CTA slots (the balanced plan
// gives every CTA the same work, so a fractional wave count leaves SMs idle in the last one).
// Shapes: the default (4 warps x 2 stages), deeper per-warp pipelines at 2 CTAs/SM (4x3, 3x4,
// 2x4, 2x6: <= 113 KB of shared memory each), 1 CTA/SM ones (4x4, 8x2), plus WEFT_BENCH_POD_DECODE's.
namespace {

__global__ void occupy_sm(int* started, const volatile int* release, long long timeout_ns) {
  if (threadIdx.x != 0) return;
  atomicAdd(started, 1);
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(500);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (*release == 0 && t - t0 < timeout_ns);
}

__global__ void wait_started(const volatile int* started, int n, long long timeout_ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (*started < n && t - t0 < timeout_ns);
}

__global__ void set_flag(int* flag) { *flag = 1; }

void run_decode_k(weft::bench::Context& ctx, const Model& m) {
  if (!ctx.wants(std::string("pod_decode/") + m.name + "/")) return;
  cudaStream_t s = ctx.stream();
  const int sms = ctx.sm_count();
  const int64_t page_elems = int64_t(kPage) * m.hkv * kD;
  const int32_t pool_pages = static_cast<int32_t>((3LL << 30) / (page_elems * 2));
  DeviceArray k(size_t(pool_pages) * page_elems * 2), v(size_t(pool_pages) * page_elems * 2);
  weft::bench::fill_random(k.get(), size_t(pool_pages) * page_elems, kBF16, 21);
  weft::bench::fill_random(v.get(), size_t(pool_pages) * page_elems, kBF16, 22);
  weft::PagedKVCache cache;
  cache.layout = weft::KVLayout::kNHD;
  cache.k_pages = weft::TensorView(k.get(), kBF16, {pool_pages, kPage, m.hkv, kD});
  cache.v_pages = weft::TensorView(v.get(), kBF16, {pool_pages, kPage, m.hkv, kD});
  const size_t row = size_t(m.hq) * kD;
  DeviceArray q(kMaxDec * row * 2), o(kMaxDec * row * 2);
  weft::bench::fill_random(q.get(), kMaxDec * row, kBF16, 23);
  // The occupier: the whole opt-in shared memory per CTA (one per SM, nothing else fits beside it).
  int optin = 0;
  WEFT_BENCH_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device()));
  WEFT_BENCH_CUDA(cudaFuncSetAttribute(occupy_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  DeviceArray flags(256);
  int* started = flags.as<int32_t>();
  int* release = started + 32;
  cudaStream_t s2;
  cudaEvent_t go, t0, t1;
  WEFT_BENCH_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  WEFT_BENCH_CUDA(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
  WEFT_BENCH_CUDA(cudaEventCreate(&t0));
  WEFT_BENCH_CUDA(cudaEventCreate(&t1));

  std::vector<std::pair<int, int>> shapes = {{4, 2}, {4, 3}, {3, 4}, {2, 4}, {2, 6}, {4, 4}, {8, 2}};
  for (const auto& sh : pod_decode_shapes())
    if (std::find(shapes.begin(), shapes.end(), sh) == shapes.end()) shapes.push_back(sh);
  struct Batch {
    int32_t b, ctx;
  };
  const Batch batches[] = {{16, 16384}, {64, 8192}, {256, 4096}};
  std::mt19937_64 rng(std::hash<std::string>{}(std::string("pod_decode/") + m.name));
  weft::AttentionVariant var;
  for (const Batch& bt : batches) {
    Table td;
    td.build(std::vector<int32_t>(bt.b, bt.ctx), pool_pages, rng);
    const weft::TensorView dq(q.get(), kBF16, {bt.b, m.hq, kD}), dout(o.get(), kBF16, {bt.b, m.hq, kD});
    for (const auto& [w, st] : shapes) {
      weft::DecodeOptions opt;
      opt.warps_per_cta = w;
      opt.pipeline_stages = st;
      const std::string base = std::string("pod_decode/") + m.name + "/b" + std::to_string(bt.b) + "/ctx" +
                               std::to_string(bt.ctx) + "/w" + std::to_string(w) + "s" + std::to_string(st);
      try {
        weft::BatchDecodeWrapper dec(bt.b, m.hq, m.hkv, kD, opt);
        DeviceArray ws(weft::BatchDecodeWrapper::workspace_size(bt.b, m.hq, m.hkv, kD, opt));
        dec.plan(td.t, m.hq, m.hkv, kD, kPage, kBF16, weft::KVLayout::kNHD, var, ws.get(), ws.bytes(), s);
        const int grid = dec.num_ctas();
        for (const int kf : {16, 32, 48, 64, sms}) {
          weft::bench::Result r;
          r.name = base + "/k" + std::to_string(kf);
          if (!ctx.wants(r.name)) continue;
          r.params = {{"model", m.name}, {"decode_batch", std::to_string(bt.b)}, {"context", std::to_string(bt.ctx)},
                      {"shape", "w" + std::to_string(w) + "s" + std::to_string(st)}, {"free_sms", std::to_string(kf)}};
          const int held = sms - kf;
          std::vector<double> ms;
          for (int rep = 0; rep < 9; ++rep) {
            ctx.flush_l2(s);
            WEFT_BENCH_CUDA(cudaMemsetAsync(flags.get(), 0, 256, s));
            WEFT_BENCH_CUDA(cudaEventRecord(go, s));
            if (held > 0) {
              occupy_sm<<<held, 32, optin, s>>>(started, release, 2000000000LL);
              WEFT_BENCH_CUDA(cudaPeekAtLastError());
            }
            WEFT_BENCH_CUDA(cudaStreamWaitEvent(s2, go, 0));
            wait_started<<<1, 1, 0, s2>>>(started, held, 2000000000LL);
            WEFT_BENCH_CUDA(cudaEventRecord(t0, s2));
            dec.run(dq, cache, td.t, dout, nullptr, s2);
            WEFT_BENCH_CUDA(cudaEventRecord(t1, s2));
            set_flag<<<1, 1, 0, s2>>>(release);
            WEFT_BENCH_CUDA(cudaStreamSynchronize(s2));
            WEFT_BENCH_CUDA(cudaStreamSynchronize(s));
            float t = 0;
            WEFT_BENCH_CUDA(cudaEventElapsedTime(&t, t0, t1));
            if (rep >= 2) ms.push_back(t);  // 2 warm-up runs
          }
          std::sort(ms.begin(), ms.end());
          r.ms = ms[ms.size() / 2];
          r.bytes = 2.0 * kD * m.hkv * 2.0 * double(bt.ctx) * bt.b;
          const int per_sm = grid / sms;
          r.extra = {{"gbps_per_sm", r.bytes / (r.ms * 1e-3) / 1e9 / kf},
                     {"free_sms", double(kf)},
                     {"decode_warps", double(w)},
                     {"decode_stages", double(st)},
                     {"ctas_per_sm", double(per_sm)},
                     {"grid", double(grid)},
                     {"waves", double(grid) / double(per_sm * kf)},
                     {"min_ms", ms.front()},
                     {"max_ms", ms.back()}};
          ctx.report(r);
        }
      } catch (const weft::Error& e) {
        weft::bench::Result r;
        r.name = base;
        ctx.report_error(r, e.what());
      }
    }
  }
  WEFT_BENCH_CUDA(cudaStreamDestroy(s2));
  WEFT_BENCH_CUDA(cudaEventDestroy(go));
  WEFT_BENCH_CUDA(cudaEventDestroy(t0));
  WEFT_BENCH_CUDA(cudaEventDestroy(t1));
}

}  // namespace

WEFT_BENCH_GROUP(pod_decode) {
  const Model models[] = {{"llama3-8b", 32, 8}, {"yi-6b", 32, 4}};
  for (const Model& m : models) run_decode_k(ctx, m);
}
