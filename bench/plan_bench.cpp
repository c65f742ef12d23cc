// weft-plan-bench: host time of the attention planners, no GPU needed (pure-C++ planner sources).
// Times, per case, the median of many warm calls of
//   decode  balance()                     the shared planner alone
//   decode  plan_decode() + serialize()   what BatchDecodeWrapper::plan_lengths() computes before its
//                                         copy is enqueued (batch_shape() included)
//   prefill make_plan() + serialize()     what BatchPrefillWrapper::plan_common() computes (the
//           + the segment arrays          metadata image and the segment arrays)
// for the planner as it was before issue 19 ("ref", tests/host/attention/plan_reference.h, kept
// verbatim) and the current one ("new": a reused plan::Planner, serialize into a reused image; for
// decode the wrapper's head-folded plan, decode_head_fold, whose unfolded twin is checked to give
// the reference's image byte for byte).
// Shapes: decode batch 1/32/128/256 on 264 CTAs (an H100/H200 decode grid: 132 SMs x 2), Llama-3-8B
// (32 qo / 8 kv heads) and Llama-2-7B (32 / 32), KV lengths uniform 4096, bimodal (512 / 32768
// alternating) and random (1..32768); prefill batch 1/16/64 of causal prompts, 32/8 heads, the
// sm90 plan (128 x 128 tiles, 132 CTAs). Every case checks that both planners give the same image
// (decode: unfolded).
//   weft-plan-bench [--filter SUBSTR] [--min-ms MS] [--copy] [--cold MB] [--router FILE]
// (route/ rows: plan_bench_route.cpp.)
// --filter cpu (only when asked for): the host's calibration rows (cpu_cases).
// --filter pat-shape (only when asked for: no timing): the "pat" trees' chunk bound, items and
// deal makespan, prefix-sharing plans with chunks from the packed work vs the previous bound.
// --copy (needs a GPU): per prefill case also times the plan into a pinned staging image + its one
// copy + the event on an idle stream ("plan+copy+event": the wrapper's plan() less its validation);
// per decode case also times what plan() enqueues after planning, on an idle
// stream: cudaMemcpyAsync of the layout's whole metadata region from a pinned staging buffer + the
// staging event's record (column "copy+event"; the host side of plan() = plan+serialize + this +
// the wrapper's validation); at batch 1 and 256 also its parts (copy alone, event record alone,
// cudaEventSynchronize on a landed copy's event: what the next plan() called before reusing the
// staging buffer; cudaEventQuery on it: what the staging ring calls instead, about once per 4
// plans; the same copy from pageable memory); and rows "staging/<n>KiB": the copy's host cost by
// size, pinned and pageable, and at 8 / 32 KiB behind a busy stream. The stream is synchronized
// outside the timed calls.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sys/mman.h>
#include <string>
#include <type_traits>
#include <vector>

#include "attention/plan/balance.h"
#include "attention/plan/pack_cost.h"
#include "attention/plan/pack_planner.h"
#include "attention/plan/prefix_forest.h"
#include "attention/plan/work_plan.h"
#include "decode/decode_plan.h"
#include "paged/block_table.h"
#include "prefill/prefill_plan.h"
#include "tests/host/attention/plan_reference.h"
#include "plan_bench.h"
#include "prefix_tree.h"

#include <cuda_runtime_api.h>

namespace weft::plan_bench {
double g_min_ms = 200;
std::vector<unsigned char> g_cold_buf;
volatile int32_t g_sink;
}  // namespace weft::plan_bench

namespace {

using namespace weft::plan_bench;
using weft::plan::BalanceConfig;
using weft::plan::BatchShape;
using weft::plan::Plan;
using weft::plan::WorkspaceLayout;

bool g_copy = false;    // --copy: time the metadata copy + event record (needs a GPU)

std::vector<int32_t> decode_lens(const std::string& dist, int batch) {
  std::vector<int32_t> v(batch);
  std::mt19937_64 rng(1234 + batch);
  for (int b = 0; b < batch; ++b) {
    if (dist == "uniform") v[b] = 4096;
    else if (dist == "bimodal") v[b] = b % 2 ? 32768 : 512;
    else v[b] = static_cast<int32_t>(std::uniform_int_distribution<int>(1, 32768)(rng));
  }
  return v;
}

bool same_bytes(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// What plan() enqueues once the image is in the staging buffer: the H2D copy of the whole metadata
// region (pinned -> device) and the staging event's record, timed on an idle stream. what:
// 0 = copy + event record (the wrapper's sequence), 1 = the copy alone, 2 = the event record
// alone, 3 = cudaEventSynchronize on the staging event of a copy that has landed (what the
// next plan() called first before the staging ring: no wait on the GPU, the call's own cost),
// 4 = cudaEventQuery on that landed event (what the ring calls about once per 4 plans),
// 5 = the copy from PAGEABLE memory (no staging buffer, event or wait would be needed if the
// driver returns once it has taken the bytes), 6 = that pageable copy enqueued behind ~1 GiB of
// device memset (does the call return before the stream reaches it?), 7 = the pinned copy behind
// the same memset (the reference: asynchronous).
Stats time_copy(const unsigned char* image, std::size_t bytes, int what = 0) {
  auto ok = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      std::fprintf(stderr, "weft-plan-bench --copy: %s: %s\n", what, cudaGetErrorString(e));
      std::exit(1);
    }
  };
  void *staging = nullptr, *dev = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t ev = nullptr;
  ok(cudaHostAlloc(&staging, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  ok(cudaMalloc(&dev, bytes), "cudaMalloc");
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  std::memcpy(staging, image, bytes);
  std::vector<unsigned char> pageable(image, image + bytes);
  void* busy = nullptr;  // what == 6, 7: a memset of this keeps the stream busy for ~0.3 ms
  const std::size_t busy_bytes = std::size_t(1) << 30;
  if (what >= 6) ok(cudaMalloc(&busy, busy_bytes), "cudaMalloc (busy)");
  const Stats st = time_calls([&] {
    if (what == 3 || what == 4) ok(cudaEventRecord(ev, s), "cudaEventRecord");
    ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // idle stream, as the bench's plan_us
    if (what >= 6) ok(cudaMemsetAsync(busy, what, busy_bytes, s), "cudaMemsetAsync");
    const auto t0 = Clock::now();
    if (what <= 1 || what == 7) ok(cudaMemcpyAsync(dev, staging, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    if (what == 5 || what == 6)
      ok(cudaMemcpyAsync(dev, pageable.data(), bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (pageable)");
    if (what == 0 || what == 2) ok(cudaEventRecord(ev, s), "cudaEventRecord");
    if (what == 3) ok(cudaEventSynchronize(ev), "cudaEventSynchronize");
    if (what == 4) ok(cudaEventQuery(ev), "cudaEventQuery");
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  });
  if (busy != nullptr) {
    ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    cudaFree(busy);
  }
  ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cudaEventDestroy(ev);
  cudaStreamDestroy(s);
  cudaFree(dev);
  cudaFreeHost(staging);
  return st;
}

struct Model {
  const char* name;
  int32_t hq, hkv;
};

void decode_cases(const std::string& filter) {
  constexpr int32_t kGrid = 264, kHeadDim = 128;
  const Model models[] = {{"llama3-8b", 32, 8}, {"llama2-7b", 32, 32}};
  for (const Model& m : models)
    for (const char* dist : {"uniform", "bimodal", "random"})
      for (int batch : {1, 32, 128, 256}) {
        const std::string name = std::string("decode/") + m.name + "/" + dist + "/b" + std::to_string(batch);
        if (name.find(filter) == std::string::npos) continue;
        const std::vector<int32_t> lens = decode_lens(dist, batch);
        const int32_t rows = weft::decode::decode_tile_rows(m.hq / m.hkv, kHeadDim, false);
        const BalanceConfig cfg = weft::decode::balance_config(kGrid, m.hq, m.hkv, rows);
        const WorkspaceLayout layout(weft::decode::plan_bounds(batch, m.hq, m.hkv, kHeadDim, kGrid, rows));
        // The wrapper folds KV heads (decode_head_fold): the plan of one head class, expanded by
        // the layout's CTA records and the kernel.
        const int32_t fold = weft::decode::decode_head_fold(m.hkv, kGrid);
        const BalanceConfig cfg_fold = weft::decode::balance_config(kGrid, m.hq, m.hkv, rows, fold);
        const WorkspaceLayout layout_fold(weft::decode::plan_bounds(batch, m.hq, m.hkv, kHeadDim, kGrid, rows, fold));
        std::vector<unsigned char> img_ref(layout.metadata_bytes()), img_new(layout_fold.metadata_bytes());

        // balance() alone (unfolded: the planner itself against the reference).
        const BatchShape shape = weft::decode::batch_shape(lens.data(), batch, -1);
        const Stats b_ref = time_calls([&] { g_sink = weft::plan::reference::balance(shape, cfg).num_items(); });
        weft::plan::Planner planner;
        Plan plan_new;
        const Stats b_new = time_calls([&] {
          planner.balance(shape, cfg, plan_new);
          g_sink = plan_new.num_items();
        });
        print_row(name, "balance", b_ref, b_new, "");

        // The wrapper's planning: shape, plan_decode, serialize into the staging image. "ref": the
        // planner before issue 19, unfolded; "new": the wrapper's folded plan. The unfolded plan of
        // the current planner must still give the reference's image byte for byte.
        Plan last_ref;
        const Stats p_ref = time_calls([&] {
          const BatchShape s = weft::decode::batch_shape(lens.data(), batch, -1);
          Plan p = weft::plan::reference::plan_decode(s, cfg);
          weft::plan::reference::serialize(layout, p, img_ref.data());
          last_ref = std::move(p);
        });
        {
          std::vector<unsigned char> img_unfolded(layout.metadata_bytes());
          Plan p;
          weft::decode::plan_decode(shape, cfg, planner, p);
          layout.serialize(p, img_unfolded.data());
          // The reference writes a launch record for every launched CTA; serialize now stops at
          // the last busy one and leaves the rest zero (plan::launch_records_used, an empty item
          // range: host test DecodePlan.LaunchRecordsUpToTheLastBusyCta). Compare against the
          // reference image with those records zeroed; everything else must match byte for byte.
          std::vector<unsigned char> ref_used = img_ref;
          const weft::plan::PlanPointers pr = layout.pointers(ref_used.data());
          const int32_t used = weft::plan::launch_records_used(p).records;
          const size_t first = size_t(reinterpret_cast<const unsigned char*>(pr.cta_first + used) - ref_used.data());
          std::memset(ref_used.data() + first, 0, size_t(layout.num_records() - used) * sizeof(weft::plan::CtaRecord));
          if (!same_bytes(ref_used, img_unfolded)) std::printf("%s: UNFOLDED IMAGE DIFFERS\n", name.c_str());
        }
        BatchShape shape_new;
        WorkspaceLayout::Image image;
        const Stats p_new = time_calls([&] {
          weft::decode::batch_shape(lens.data(), batch, -1, shape_new);
          weft::decode::plan_decode(shape_new, cfg_fold, planner, plan_new);
          layout_fold.serialize(plan_new, img_new.data(), &image);
        });
        double ms_ref = 0, ms_new = 0;
        for (double c : last_ref.cta_cost) ms_ref = std::max(ms_ref, c);
        for (double c : plan_new.cta_cost) ms_new = std::max(ms_new, c);
        // The CTA records the folded image holds (plan::launch_records_used: per launched CTA up to
        // the last busy one) and the bytes serialize writes (the wrapper's estimate).
        const weft::plan::LaunchRecords ll = weft::plan::launch_records_used(plan_new);
        const std::size_t written = weft::plan::launch_plan_array_bytes(plan_new.num_items(), plan_new.num_ctas,
                                                                        ll.records, plan_new.num_merges(), batch);
        char note[200];
        std::snprintf(note, sizeof note, "items %d merges %d | fold %d: %d x %d, makespan %.3fx | records %d, %zu B",
                      last_ref.num_items(), last_ref.num_merges(), fold, plan_new.num_items(), fold,
                      ms_ref > 0 ? ms_new / ms_ref : 1.0, ll.records, written);
        print_row(name, "plan+serialize", p_ref, p_new, note);
        if (g_copy) {
          const Stats c = time_copy(img_new.data(), img_new.size());  // the folded layout's region
          char cnote[64];
          std::snprintf(cnote, sizeof cnote, "%zu bytes", img_new.size());
          print_row(name, "copy+event", c, c, cnote);
          if (batch == 1 || batch == 256) {  // the parts, at the two batch sizes
            const Stats c1 = time_copy(img_new.data(), img_new.size(), 1);
            print_row(name, "copy alone", c1, c1, cnote);
            const Stats c2 = time_copy(img_new.data(), img_new.size(), 2);
            print_row(name, "event alone", c2, c2, "");
            const Stats c3 = time_copy(img_new.data(), img_new.size(), 3);
            print_row(name, "sync (landed)", c3, c3, "cudaEventSynchronize, copy done");
            const Stats c4 = time_copy(img_new.data(), img_new.size(), 4);
            print_row(name, "query (landed)", c4, c4, "cudaEventQuery, copy done");
            const Stats c5 = time_copy(img_new.data(), img_new.size(), 5);
            print_row(name, "pageable copy", c5, c5, cnote);
          }
        }
      }
}

void prefill_cases(const std::string& filter) {
  struct Case {
    const char* name;
    std::vector<int32_t> q;
  };
  std::vector<Case> cases;
  cases.push_back({"prefill/b1/L4096", {4096}});
  cases.push_back({"prefill/b16/L1024", std::vector<int32_t>(16, 1024)});
  for (int hi : {448, 2048}) {
    // 64 prompts of 64..hi tokens (a fixed draw; hi 448, ~16K tokens: weft-bench's prefill/plan/b64).
    std::vector<int32_t> q(64);
    std::mt19937_64 rng(64);
    for (auto& l : q) l = static_cast<int32_t>(std::uniform_int_distribution<int>(64, hi)(rng));
    cases.push_back({hi == 448 ? "prefill/b64/q64-448" : "prefill/b64/q64-2048", q});
  }
  for (const Case& c : cases) {
    if (std::string(c.name).find(filter) == std::string::npos) continue;
    weft::prefill::PlanRequest req;
    req.qo_len = c.q;
    req.kv_len = c.q;
    req.num_kv_heads = 8;
    req.group_size = 4;
    req.causal = true;
    req.cta_q = 128;
    req.cta_kv = 128;
    req.num_ctas = 132;
    int64_t total_q = 0;
    for (int32_t l : c.q) total_q += l;
    const weft::prefill::PrefillWorkspaceLayout layout = weft::prefill::make_layout(
        static_cast<int32_t>(c.q.size()), total_q, 8, 4, req.cta_q, 128, req.num_ctas);
    // The segment arrays sit at the end of the metadata region (PrefillWorkspaceLayout).
    std::vector<unsigned char> img_ref(layout.plan.metadata_bytes());
    std::vector<unsigned char> img_new(img_ref.size());
    auto put_extras = [&](unsigned char* img, const weft::prefill::SegmentedPlan& sp,
                          const weft::prefill::PrefillWorkspaceLayout& l) {
      std::memset(img + l.off_seg_request, 0, l.extra_bytes);
      auto put = [&](std::size_t off, const std::vector<int32_t>& v) {
        if (!v.empty()) std::memcpy(img + off, v.data(), v.size() * sizeof(int32_t));
      };
      put(l.off_seg_request, sp.seg_request);
      put(l.off_seg_token0, sp.seg_token0);
      put(l.off_seg_pos0, sp.seg_pos0);
      put(l.off_real_kv_len, req.kv_len);
    };
    weft::prefill::SegmentedPlan last_ref;
    const Stats ref = time_calls([&] {
      weft::prefill::SegmentedPlan sp = weft::plan::reference::make_prefill_plan(req);
      weft::plan::reference::serialize(layout.plan, sp.plan, img_ref.data());
      put_extras(img_ref.data(), sp, layout);
      last_ref = std::move(sp);
    });
    weft::prefill::PrefillPlanner planner;
    weft::prefill::SegmentedPlan sp_new;
    {  // the current planner unfolded: the reference's image byte for byte
      WorkspaceLayout::Image image;
      planner.make_plan(req, sp_new);
      layout.plan.serialize(sp_new.plan, img_new.data(), &image);
      put_extras(img_new.data(), sp_new, layout);
    }
    const bool same = same_bytes(img_ref, img_new);
    // The wrapper's plan: head-folded (prefill_head_fold), into the folded layout.
    weft::prefill::PlanRequest req_fold = req;
    req_fold.head_fold = weft::prefill::prefill_head_fold(req.num_kv_heads, req.num_ctas);
    // (the wrapper's default: PrefillPlanOptions::deal_heads_together off; the "grouped" column
    // below times it on)
    const weft::prefill::PrefillWorkspaceLayout layout_fold = weft::prefill::make_layout(
        static_cast<int32_t>(c.q.size()), total_q, 8, 4, req.cta_q, 128, req.num_ctas, req_fold.head_fold);
    std::vector<unsigned char> img_fold(layout_fold.plan.metadata_bytes());
    WorkspaceLayout::Image image;
    const Stats neu = time_calls([&] {
      planner.make_plan(req_fold, sp_new);
      layout_fold.plan.serialize(sp_new.plan, img_fold.data(), &image);
      put_extras(img_fold.data(), sp_new, layout_fold);
    });
    {  // the parts of "plan+serialize" (host time split for the device host, issue 19)
      const Stats plan_only = time_calls([&] { planner.make_plan(req_fold, sp_new); });
      print_row(c.name, "plan only", plan_only, plan_only, "PrefillPlanner::make_plan (folded)");
      const Stats ser_only = time_calls([&] {
        layout_fold.plan.serialize(sp_new.plan, img_fold.data(), &image);
        put_extras(img_fold.data(), sp_new, layout_fold);
      });
      print_row(c.name, "serialize only", ser_only, ser_only, "incremental image + segment arrays");
      WorkspaceLayout::Image fresh;
      const Stats ser_full = time_calls([&] {
        fresh.valid = false;  // the whole metadata region cleared first (a new staging slot)
        layout_fold.plan.serialize(sp_new.plan, img_fold.data(), &fresh);
        put_extras(img_fold.data(), sp_new, layout_fold);
      });
      char mnote[64];
      std::snprintf(mnote, sizeof mnote, "region cleared each call (%zu B)", img_fold.size());
      print_row(c.name, "serialize, clear", ser_full, ser_full, mnote);
    }
    char note[128];
    std::snprintf(note, sizeof note, "segs %d items %d merges %d %s | fold %d: %d x %d", last_ref.plan.batch,
                  last_ref.plan.num_items(), last_ref.plan.num_merges(), same ? "same image" : "IMAGE DIFFERS",
                  req_fold.head_fold, sp_new.plan.num_items(), req_fold.head_fold);
    print_row(c.name, "plan+serialize", ref, neu, note);
    {  // PrefillPlanOptions::deal_heads_together (off by default): a segment's head classes together
      weft::prefill::PlanRequest req_grouped = req_fold;
      req_grouped.deal_heads_together = true;
      const Stats grp = time_calls([&] {
        planner.make_plan(req_grouped, sp_new);
        layout_fold.plan.serialize(sp_new.plan, img_fold.data(), &image);
        put_extras(img_fold.data(), sp_new, layout_fold);
      });
      print_row(c.name, "plan+serialize grouped", ref, grp, "head classes dealt together (opt-in)");
    }
    if (g_copy) {
      // What the wrapper's plan() does after its validation: the plan into a pinned staging image,
      // one copy of the metadata (segment arrays at its end) and the staging event, on an idle stream.
      void *staging = nullptr, *dev = nullptr;
      cudaStream_t s = nullptr;
      cudaEvent_t ev = nullptr;
      const std::size_t bytes = img_fold.size();
      if (cudaHostAlloc(&staging, bytes, cudaHostAllocDefault) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess ||
          cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
          cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        std::fprintf(stderr, "weft-plan-bench --copy: CUDA setup failed\n");
        std::exit(1);
      }
      unsigned char* st = static_cast<unsigned char*>(staging);
      WorkspaceLayout::Image simage;
      const Stats pc = time_calls([&] {
        cudaStreamSynchronize(s);  // idle stream, as the bench's plan_us (not timed)
        const auto t0 = Clock::now();
        planner.make_plan(req_fold, sp_new);
        layout_fold.plan.serialize(sp_new.plan, st, &simage);
        put_extras(st, sp_new, layout_fold);
        cudaMemcpyAsync(dev, st, bytes, cudaMemcpyHostToDevice, s);
        cudaEventRecord(ev, s);
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      });
      cudaStreamSynchronize(s);
      char cnote[64];
      std::snprintf(cnote, sizeof cnote, "%zu bytes, pinned staging", bytes);
      print_row(c.name, "plan+copy+event", pc, pc, cnote);
      cudaEventDestroy(ev);
      cudaStreamDestroy(s);
      cudaFree(dev);
      cudaFreeHost(staging);
    }
  }
}

// Prefix-sharing plans (DecodeOptions::share_prefixes) of 256 requests in a 3-level tree ([1, 4,
// 16] nodes: a 2048-key root, 4 x 512-key children, 16 x 256-key grandchildren, 16 requests under
// each grandchild with 123 private keys, the last page partial), page 16, Llama-3-8B heads
// (32/8), 264 CTAs, chunks as the wrapper cuts them (pack_max_chunk's rule):
//   pack/b256/levels3       a full plan: prefix forest + pack plan + PackPlanner's key and index
//                           + serialize (what plan() does on a new prefix structure);
//   pack/b256/levels3/lazy  a lazy update: every request's length moves by one key (a decode
//                           step; alternately +1 and -1 so that every call is an update), key
//                           check + rewrite + serialize of the key arrays that moved
//                           (PackPlanner::serialize_moved: here the ends; the wrapper's
//                           serialize while its workspace holds the previous version).
// PAT's targets (issue 21): <= 100 us for a full plan, <= 10 us for a lazy update.
void pack_cases(const std::string& filter) {
  const std::string name = "pack/b256/levels3";
  if (!filter.empty() && name.find(filter) == std::string::npos && (name + "/lazy").find(filter) == std::string::npos)
    return;
  const int32_t ps = 16;
  weft::bench::PrefixTreeBatch t = weft::bench::make_prefix_tree_batch({1, 4, 16, 256}, {2048, 512, 256, 123}, ps);
  const int32_t batch = t.batch();
  const weft::plan::PackPlanConfig pc = weft::bench::pack_bench_config(ps, 264, 8, 4, 128);
  const weft::plan::WorkPlanLayout layout(weft::bench::pack_bench_bounds(batch, 264, 8, 128));
  std::vector<unsigned char> image(layout.metadata_bytes());
  weft::plan::PackPlanner planner;
  const Stats full = time_calls([&] {
    planner.reset();
    planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), batch, pc);
    layout.serialize(planner.current(), image.data());
  });
  const weft::plan::WorkPlan& wp = planner.current();
  int packs = 0;
  for (int32_t n : wp.item_num_reqs) packs += n >= 2;
  char note[160];
  std::snprintf(note, sizeof note, "batch %d nodes %d items %d packs %d (no reference planner)", batch,
                int(planner.forest().nodes.size()), wp.num_items(), packs);
  print_row(name, "forest+pack+ser", full, full, note);
  int lazy = 0, calls = 0, delta = 1;
  const Stats upd = time_calls([&] {
    for (auto& l : t.kv_len) l += delta;
    delta = -delta;
    ++calls;
    lazy += planner.plan(t.indptr.data(), t.indices.data(), t.kv_len.data(), batch, pc) ==
            weft::plan::PackPlanner::Update::kLazy;
    planner.serialize_moved(layout, image.data());  // as the wrapper (image: the previous version)
  });
  std::snprintf(note, sizeof note, "lazy updates %d of %d calls", lazy, calls);
  print_row(name + "/lazy", "key+rewrite+ser", upd, upd, note);
}

// The "pat" bench's trees (bench/cases_decode_pat.cu) x its head configs, d128, page 16, 264 CTAs:
// the chunk bound, items and deal makespan (in the deal's cost units, rows + keys per CTA; mean in
// brackets) of the wrapper's prefix-sharing plan (chunks from the packed work,
// PackPlanConfig::auto_chunk_min) against the previous bound from every request's keys
// (pack_max_chunk of the batch's keys). No timing: rows "pat-shape/<heads>/B<fan>/L<len>".
void pat_shape_cases(const std::string& filter) {
  if (filter.find("pat-shape") == std::string::npos) return;
  const int32_t heads[][2] = {{32, 32}, {16, 8}, {32, 8}, {64, 8}};
  const auto join = weft::bench::join_dims;
  auto makespan = [](const weft::plan::WorkPlan& p, int64_t& mean) {
    int64_t worst = 0, total = 0;
    for (int32_t c = 0; c < p.num_ctas; ++c) {
      int64_t load = 0;
      for (int32_t i = p.cta_indptr[c]; i < p.cta_indptr[c + 1]; ++i)
        load += (p.item_row_end[i] - p.item_row_begin[i]) + (p.item_kv_end[i] - p.item_kv_begin[i]);
      worst = std::max(worst, load);
      total += load;
    }
    mean = total / p.num_ctas;
    return worst;
  };
  for (const auto& h : heads)
    for (const weft::bench::PatTree& tr : weft::bench::pat_trees()) {
      const std::string name = "pat-shape/" + std::to_string(h[0]) + "x" + std::to_string(h[1]) + "/B" +
                               join(tr.fan) + "/L" + join(tr.keys);
      const weft::bench::PrefixTreeBatch t = weft::bench::make_prefix_tree_batch(tr.fan, tr.keys, 16);
      const weft::plan::PackPlanConfig now = weft::bench::pack_bench_config(16, 264, h[1], h[0] / h[1], 128);
      weft::plan::PackPlanConfig before = now;
      int64_t keys = 0;
      for (int32_t l : t.kv_len) keys += l;
      before.auto_chunk_min = 0;
      before.max_chunk =
          weft::plan::pack_max_chunk(keys, h[1], 264, weft::decode::kMinChunk, weft::decode::kPlanKVTile);
      const weft::plan::PrefixForest f =
          weft::plan::build_prefix_forest(t.indptr.data(), t.indices.data(), t.kv_len.data(), t.batch(), 16);
      weft::plan::PackPlanScratch sc;
      weft::plan::WorkPlan pn, pb;
      weft::plan::make_pack_plan(f, t.indptr.data(), t.kv_len.data(), now, pn, sc);
      const int32_t chunk = sc.max_chunk;
      weft::plan::make_pack_plan(f, t.indptr.data(), t.kv_len.data(), before, pb, sc);
      int64_t mb = 0, mn = 0;
      const int64_t wb = makespan(pb, mb), wn = makespan(pn, mn);
      std::printf("%-44s chunk %6d -> %5d  items %5d -> %5d  makespan %6lld -> %5lld  (mean %lld -> %lld)\n",
                  name.c_str(), before.max_chunk, chunk, pb.num_items(), pn.num_items(), (long long)wb,
                  (long long)wn, (long long)mb, (long long)mn);
    }
}

// The prefix-sharing cost model on the "pat" bench's batches (heuristics::prefix_share_pays; only
// when the filter names "pat-cost"): per tree x head config (d128, page 16, H100: 264-CTA decode
// grid, 132 SMs, the sm90 wide tile) the wrapper's pack plan (pat_wrapper_plan), the model's
// inputs (keys of 512 bytes per CTA) and its predicted times and choice. No timing. One line per
// batch, "pat-cost <heads> B<fan> L<len> key=value ...", read by bench/pat_fallback_replay.py.
void pat_cost_cases(const std::string& filter) {
  if (filter.find("pat-cost") == std::string::npos) return;
  const int32_t heads[][2] = {{32, 32}, {16, 8}, {32, 8}, {64, 8}};
  const auto join = weft::bench::join_dims;
  std::vector<weft::bench::PatTree> trees = weft::bench::pat_trees();
  trees.push_back({{64}, {2560}});  // the no-sharing control
  for (const auto& h : heads)
    for (const weft::bench::PatTree& tr : trees) {
      const weft::bench::PrefixTreeBatch t = weft::bench::make_prefix_tree_batch(tr.fan, tr.keys, 16);
      weft::plan::PackPlanner planner;
      const weft::plan::PackPlanConfig pc = weft::bench::pat_wrapper_plan(t, h[0], h[1], 264, 132, true, 16, planner);
      const weft::plan::WorkPlan& p = planner.current();
      int32_t packs = 0;
      for (int32_t n : p.item_num_reqs) packs += n >= 2;
      const bool cc = weft::heuristics::decode_prefers_cuda_cores(h[0] / h[1], 128);
      const weft::heuristics::PrefixShareCostInputs in = weft::plan::share_cost_inputs(
          planner.forest(), p, t.kv_len.data(), t.batch(), 16, pc.head_fold, pc.kv_bytes_per_key, cc);
      const double dus = weft::heuristics::predict_decode_us(in), sus = weft::heuristics::predict_share_us(in);
      const bool pays = weft::heuristics::prefix_share_pays(in);
      std::printf("pat-cost %dx%d B%s L%s items=%d packs=%d wide_items=%d unique=%.1f repeat=%.1f cc=%d private=%.1f "
                  "pack=%.1f max_cta=%.1f max_wide=%.1f decode_us=%.1f share_us=%.1f ratio=%.3f choice=%s\n",
                  h[0], h[1], join(tr.fan).c_str(), join(tr.keys).c_str(), p.num_items(), packs, p.num_wide_items,
                  in.unique_keys_per_cta, in.repeat_keys_per_cta, int(cc), in.private_keys_per_cta,
                  in.pack_keys_per_cta, in.max_cta_keys, in.max_wide_cta_keys, dus, sus, sus / dus,
                  packs == 0 ? "decode(no-pack)" : pays ? "share" : "decode");
    }
}

// "cpu/" rows (only when the filter names "cpu": calibration, no planner): what this machine's CPU
// and memory cost for work of a plan's shape, to compare hosts (issue 19: the same planner binary
// took ~3x longer on the H100 host than on the dev box). chain: a dependent multiply-add chain
// (4 cycles per step on current x86 cores: imul 3 + add 1), reported as the clock it implies;
// sum16k: a sum over 16 KiB (L1); memset93k: the prefill b64 image's region, warm; heap256k:
// malloc + touch + free of 256 KiB (glibc maps it fresh each time: page faults); touch64k: mmap,
// write and munmap 64 KiB (16 first-touch page faults).
void cpu_cases(const std::string& filter) {
  if (filter.find("cpu") == std::string::npos) return;
  constexpr int kSteps = 100000;
  const Stats chain = time_calls([&] {
    uint64_t x = static_cast<uint64_t>(g_sink) | 1;
    for (int i = 0; i < kSteps; ++i) x = x * 0x9E3779B97F4A7C15ull + 1;
    g_sink = static_cast<int32_t>(x);
  });
  char note[96];
  std::snprintf(note, sizeof note, "%d dependent steps: %.2f GHz at 4 cycles/step", kSteps, 4.0 * kSteps / (chain.median * 1e3));
  print_row("cpu/chain", "mul-add chain", chain, chain, note);
  std::vector<int32_t> a(4096, 1);
  const Stats sum = time_calls([&] {
    int32_t t = 0;
    for (int32_t v : a) t += v ^ g_sink;
    g_sink = t;
  });
  print_row("cpu/sum16k", "sum 16 KiB", sum, sum, "L1-resident");
  std::vector<unsigned char> img(93184);
  const Stats ms = time_calls([&] {
    std::memset(img.data(), g_sink & 1, img.size());
    g_sink = img[img.size() / 2];
  });
  print_row("cpu/memset93k", "memset 91 KiB", ms, ms, "warm buffer");
  const Stats heap = time_calls([&] {
    auto* p = static_cast<unsigned char*>(std::malloc(256 * 1024));
    for (size_t i = 0; i < 256 * 1024; i += 4096) p[i] = 1;
    g_sink = p[4096];
    std::free(p);
  });
  print_row("cpu/heap256k", "malloc+touch+free", heap, heap, "64 pages, glibc mmap threshold");
  const Stats touch = time_calls([&] {
    void* m = mmap(nullptr, 64 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    auto* p = static_cast<unsigned char*>(m);
    for (size_t i = 0; i < 64 * 1024; i += 4096) p[i] = 1;
    g_sink = p[0];
    munmap(m, 64 * 1024);
  });
  print_row("cpu/touch64k", "mmap+touch+unmap", touch, touch, "16 first-touch page faults");
}

}  // namespace

// --copy: the pinned -> device copy's host cost by size (the driver may take a different route for
// small copies), alone and with the event record.
void copy_sweep(const std::string& filter) {
  if (!g_copy || (!filter.empty() && std::string("staging/").find(filter) == std::string::npos &&
                  filter.find("staging") == std::string::npos))
    return;
  for (std::size_t kb : {2, 4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 128}) {
    std::vector<unsigned char> img(kb * 1024, 1);
    const std::string name = "staging/" + std::to_string(kb) + "KiB";
    const Stats a = time_copy(img.data(), img.size(), 1);
    print_row(name, "copy alone", a, a, "");
    const Stats b = time_copy(img.data(), img.size(), 0);
    print_row(name, "copy+event", b, b, "");
    const Stats c = time_copy(img.data(), img.size(), 5);
    print_row(name, "pageable copy", c, c, "");
    if (kb == 8 || kb == 32) {  // does a copy return before the stream reaches it?
      const Stats d = time_copy(img.data(), img.size(), 6);
      print_row(name, "pageable, busy", d, d, "behind ~1 GiB of memset");
      const Stats e = time_copy(img.data(), img.size(), 7);
      print_row(name, "pinned, busy", e, e, "behind ~1 GiB of memset");
    }
  }
}

int main(int argc, char** argv) {
  using namespace weft::plan_bench;
  std::string filter, router = WEFT_SOURCE_DIR "/data/router/h100.json";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
    else if (!std::strcmp(argv[i], "--min-ms") && i + 1 < argc) g_min_ms = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--copy")) g_copy = true;
    else if (!std::strcmp(argv[i], "--cold") && i + 1 < argc) {
      char* end = nullptr;
      const double mb = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(mb > 0 && mb <= 4096)) {
        std::fprintf(stderr, "weft-plan-bench: --cold expects MiB in (0, 4096], got '%s'\n", argv[i]);
        return 1;
      }
      g_cold_buf.assign(size_t(mb * (1 << 20)), 0);
    }
    else if (!std::strcmp(argv[i], "--router") && i + 1 < argc) router = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--filter SUBSTR] [--min-ms MS] [--copy] [--cold MB] [--router FILE]\n", argv[0]);
      return 2;
    }
  }
  std::printf("%-40s %-16s %9s %9s %9s   %-20s  %s\n", "case", "timed", "ref_us", "new_us", "speedup",
              "new p10..p90 us", "");
  decode_cases(filter);
  prefill_cases(filter);
  pack_cases(filter);
  route_cases(filter, router);
  pat_shape_cases(filter);
  pat_cost_cases(filter);
  cpu_cases(filter);
  copy_sweep(filter);
  return 0;
}
