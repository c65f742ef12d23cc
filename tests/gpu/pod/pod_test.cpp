// GPU tests of BatchPODAttention: random hybrid batches (prefill chunks with history + decodes on
// one paged cache) against the float64 reference, in the fused kernel (every binding policy) and
// the serial fallback; CUDA-graph replay after re-plans with other mixes; bitwise determinism;
// edge cases (q_len 1, kv_len 0 decodes, empty sides); rejected calls write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "attention/heuristics.h"
#include "reference/attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "weft/pod.h"

namespace weft::test_pod {
namespace {

using test::DeviceBuffer;
using test::Rng;

struct Mix {
  std::vector<int32_t> chunk, history;  // prefill requests: q_len, keys before the chunk
  std::vector<int32_t> dec_kv;          // decode requests
};

struct Shape {
  int32_t hq = 32, hkv = 8, d = 128;
  DType dtype = DType::kBFloat16;
  int32_t page_size = 16;
  std::string describe() const {
    std::ostringstream os;
    os << hq << "/" << hkv << " d" << d << " " << dtype_name(dtype) << " page " << page_size;
    return os.str();
  }
};

std::string describe(const Mix& m) {
  std::ostringstream os;
  os << "prefill";
  for (std::size_t i = 0; i < m.chunk.size(); ++i) os << " " << m.chunk[i] << "+" << m.history[i];
  os << " | decode " << m.dec_kv.size() << " kv";
  for (std::size_t i = 0; i < std::min<std::size_t>(m.dec_kv.size(), 6); ++i) os << " " << m.dec_kv[i];
  return os.str();
}

Mix random_mix(Rng& rng, int max_chunk, int max_hist, int max_dec, int max_dkv) {
  Mix m;
  const int np = static_cast<int>(rng.randint(1, 2));
  for (int i = 0; i < np; ++i) {
    m.chunk.push_back(static_cast<int32_t>(rng.randint(1, max_chunk)));
    m.history.push_back(static_cast<int32_t>(rng.randint(0, max_hist)));
  }
  const int nd = static_cast<int>(rng.randint(1, max_dec));
  for (int i = 0; i < nd; ++i) m.dec_kv.push_back(static_cast<int32_t>(rng.randint(1, max_dkv)));
  return m;
}

// Device state sized by capacity (fixed pointers for graphs); a Mix is loaded into it.
struct Hybrid {
  Shape s;
  int64_t max_tokens = 0, max_pages = 0;
  int32_t max_pre = 0, max_dec = 0;
  // Host copies (rounded) of the current mix.
  Mix m;
  std::vector<int32_t> qo_indptr, p_indptr, p_indices, p_last, d_indptr, d_indices, d_last;
  std::vector<float> kpool, vpool, pq, dq;
  int64_t total_q = 0, num_pages = 0;
  DeviceBuffer dk, dv, d_pq, d_dq, d_pout, d_dout, d_plse, d_dlse;
  DeviceBuffer d_pip, d_pidx, d_plast, d_dip, d_didx, d_dlast;
  PageTable pt, dt;
  PagedKVCache cache;

  Hybrid(const Shape& sh, int64_t tokens, int64_t pages, int32_t pre, int32_t dec)
      : s(sh), max_tokens(tokens), max_pages(pages), max_pre(pre), max_dec(dec),
        dk(pages * sh.page_size * sh.hkv * sh.d * 2), dv(pages * sh.page_size * sh.hkv * sh.d * 2),
        d_pq(tokens * sh.hq * sh.d * 2), d_dq(int64_t(dec) * sh.hq * sh.d * 2),
        d_pout(tokens * sh.hq * sh.d * 2), d_dout(int64_t(dec) * sh.hq * sh.d * 2),
        d_plse(tokens * sh.hq * 4), d_dlse(int64_t(dec) * sh.hq * 4), d_pip((pre + 1) * 4), d_pidx(pages * 4),
        d_plast(pre * 4), d_dip((dec + 1) * 4), d_didx(pages * 4), d_dlast(dec * 4) {}

  void load(const Mix& mix, Rng& rng) {
    m = mix;
    const int32_t ps = s.page_size;
    auto pages_of = [&](int64_t kv) { return (kv + ps - 1) / ps; };
    int64_t pages = 0;
    total_q = 0;
    for (std::size_t i = 0; i < m.chunk.size(); ++i) {
      pages += pages_of(m.chunk[i] + m.history[i]);
      total_q += m.chunk[i];
    }
    for (int32_t kv : m.dec_kv) pages += pages_of(kv);
    num_pages = pages + 2;  // two unused pages
    ASSERT_LE(num_pages, max_pages);
    ASSERT_LE(total_q, max_tokens);
    // Page ids shuffled over the pool: requests' pages are scattered.
    std::vector<int32_t> ids(num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng.engine());
    int64_t next = 0;
    auto table = [&](const std::vector<int32_t>& kvs, std::vector<int32_t>& ip, std::vector<int32_t>& idx,
                     std::vector<int32_t>& last) {
      ip.assign(1, 0);
      idx.clear();
      last.clear();
      for (int32_t kv : kvs) {
        for (int64_t p = 0; p < pages_of(kv); ++p) idx.push_back(ids[next++]);
        ip.push_back(static_cast<int32_t>(idx.size()));
        last.push_back(kv == 0 ? 0 : (kv - 1) % ps + 1);
      }
    };
    std::vector<int32_t> pre_kv;
    for (std::size_t i = 0; i < m.chunk.size(); ++i) pre_kv.push_back(m.chunk[i] + m.history[i]);
    table(pre_kv, p_indptr, p_indices, p_last);
    table(m.dec_kv, d_indptr, d_indices, d_last);
    qo_indptr.assign(1, 0);
    for (int32_t c : m.chunk) qo_indptr.push_back(qo_indptr.back() + c);

    const int64_t pool = num_pages * ps * s.hkv * s.d;
    kpool = rng.uniform_vec(pool, -1.0, 1.0);
    vpool = rng.uniform_vec(pool, -1.0, 1.0);
    pq = rng.uniform_vec(std::max<int64_t>(total_q * s.hq * s.d, 1), -2.0, 2.0);
    dq = rng.uniform_vec(std::max<int64_t>(int64_t(m.dec_kv.size()) * s.hq * s.d, 1), -2.0, 2.0);
    for (auto* v : {&kpool, &vpool, &pq, &dq}) test::round_inplace(s.dtype, *v);
    auto up = [](DeviceBuffer& b, const std::vector<uint16_t>& h) { b.upload(h.data(), h.size() * 2); };
    up(dk, test::to_half_bits(s.dtype, kpool));
    up(dv, test::to_half_bits(s.dtype, vpool));
    up(d_pq, test::to_half_bits(s.dtype, pq));
    up(d_dq, test::to_half_bits(s.dtype, dq));
    auto upi = [](DeviceBuffer& b, const std::vector<int32_t>& h) {
      if (!h.empty()) b.upload(h.data(), h.size() * 4);
    };
    upi(d_pip, p_indptr);
    upi(d_pidx, p_indices);
    upi(d_plast, p_last);
    upi(d_dip, d_indptr);
    upi(d_didx, d_indices);
    upi(d_dlast, d_last);
    auto mk = [](PageTable& t, int32_t b, DeviceBuffer& ip, const std::vector<int32_t>& hip, DeviceBuffer& ix,
                 const std::vector<int32_t>& hix, DeviceBuffer& la, const std::vector<int32_t>& hla) {
      t.batch_size = b;
      t.indptr = {static_cast<const int32_t*>(ip.get()), hip.data(), int64_t(hip.size())};
      t.indices = {static_cast<const int32_t*>(ix.get()), hix.data(), int64_t(hix.size())};
      t.last_page_len = {static_cast<const int32_t*>(la.get()), hla.data(), int64_t(hla.size())};
    };
    mk(pt, static_cast<int32_t>(m.chunk.size()), d_pip, p_indptr, d_pidx, p_indices, d_plast, p_last);
    mk(dt, static_cast<int32_t>(m.dec_kv.size()), d_dip, d_indptr, d_didx, d_indices, d_dlast, d_last);
    cache.k_pages = TensorView(dk.get(), s.dtype, {num_pages, ps, s.hkv, s.d});
    cache.v_pages = TensorView(dv.get(), s.dtype, {num_pages, ps, s.hkv, s.d});
    cache.layout = KVLayout::kNHD;
  }

  TensorView pq_view() const { return TensorView(d_pq.get(), s.dtype, {total_q, s.hq, s.d}); }
  TensorView dq_view() const { return TensorView(d_dq.get(), s.dtype, {int64_t(m.dec_kv.size()), s.hq, s.d}); }
  TensorView pout_view() const { return TensorView(d_pout.get(), s.dtype, {total_q, s.hq, s.d}); }
  TensorView dout_view() const { return TensorView(d_dout.get(), s.dtype, {int64_t(m.dec_kv.size()), s.hq, s.d}); }
  TensorView plse_view() const { return TensorView(d_plse.get(), DType::kFloat32, {total_q, s.hq}); }
  TensorView dlse_view() const { return TensorView(d_dlse.get(), DType::kFloat32, {int64_t(m.dec_kv.size()), s.hq}); }

  void poison() {
    for (DeviceBuffer* b : {&d_pout, &d_dout, &d_plse, &d_dlse}) b->poison();
  }
  void plan(BatchPODAttention& pod, const AttentionVariant& var, DeviceBuffer& ws, std::size_t bytes) {
    pod.plan(qo_indptr.data(), pt, dt, s.page_size, s.dtype, var, ws.get(), bytes, nullptr);
  }
  void run(BatchPODAttention& pod, cudaStream_t stream = nullptr) {
    const TensorView pl = plse_view(), dl = dlse_view();
    pod.run(pq_view(), dq_view(), cache, pt, dt, pout_view(), dout_view(), &pl, &dl, stream);
  }

  // Downloads O and LSE of both sides.
  struct Out {
    std::vector<uint16_t> po, dout;
    std::vector<float> plse, dlse;
    bool operator==(const Out& o) const { return po == o.po && dout == o.dout && plse == o.plse && dlse == o.dlse; }
  };
  Out download() const {
    Out o;
    o.po = d_pout.to_vector<uint16_t>(total_q * s.hq * s.d);
    o.dout = d_dout.to_vector<uint16_t>(m.dec_kv.size() * s.hq * s.d);
    o.plse = d_plse.to_vector<float>(total_q * s.hq);
    o.dlse = d_dlse.to_vector<float>(m.dec_kv.size() * s.hq);
    return o;
  }

  // The float64 reference of the loaded mix and the tolerances from the low-precision emulation
  // (computed once per mix; every mode is checked against it).
  struct Side {
    std::vector<double> o, lse;
    test::Tolerance to{}, tl{};
    bool empty = true;
  };
  struct Expected {
    Side pre, dec;
  };
  Expected reference(const AttentionVariant& var) const {
    ref::PagedKV kv;
    kv.k_pages = kpool.data();
    kv.v_pages = vpool.data();
    kv.num_pages = num_pages;
    kv.page_size = s.page_size;
    kv.num_kv_heads = s.hkv;
    kv.head_dim = s.d;
    const ref::Options opt = ref::options_from(var);
    auto side = [&](const float* q, const std::vector<int32_t>& qo, const std::vector<int32_t>& ip,
                    const std::vector<int32_t>& idx, const std::vector<int32_t>& last) {
      Side sd;
      if (qo.back() == 0) return sd;
      ref::PagedKV k = kv;
      k.indptr = ip;
      k.indices = idx;
      k.last_page_len = last;
      const ref::RaggedQ rq{q, s.hq, s.d, qo};
      ref::Result exact = ref::attention(rq, k, opt);
      const ref::Result low = ref::attention_low_precision(rq, k, opt, s.dtype);
      sd.to = test::tolerance_from_baseline(test::compare(ref::to_float(low.o), exact.o));
      sd.tl = test::tolerance_from_baseline(test::compare(ref::to_float(low.lse), exact.lse));
      sd.o = std::move(exact.o);
      sd.lse = std::move(exact.lse);
      sd.empty = false;
      return sd;
    };
    Expected e;
    e.pre = side(pq.data(), qo_indptr, p_indptr, p_indices, p_last);
    e.dec = side(dq.data(), ref::iota_indptr(int64_t(m.dec_kv.size())), d_indptr, d_indices, d_last);
    return e;
  }

  void check(const Expected& e, const std::string& what) const {
    const Out out = download();
    auto side = [&](const char* name, const Side& sd, const std::vector<uint16_t>& o_bits,
                    const std::vector<float>& lse) {
      if (sd.empty) return;
      const test::Comparison co = test::compare(test::from_half_bits(s.dtype, o_bits), sd.o);
      const test::Comparison cl = test::compare(lse, sd.lse);
      EXPECT_TRUE(test::within(co, sd.to)) << what << " " << name << " O: " << co.summary() << " tol " << sd.to.rel_l2;
      EXPECT_TRUE(test::within(cl, sd.tl)) << what << " " << name << " LSE: " << cl.summary() << " tol " << sd.tl.rel_l2;
    };
    side("prefill", e.pre, out.po, out.plse);
    side("decode", e.dec, out.dout, out.dlse);
  }
  void check(const AttentionVariant& var, const std::string& what) const { check(reference(var), what); }
};

PodBounds bounds_of(const Shape& s, int64_t tokens, int32_t pre, int32_t dec) {
  PodBounds b;
  b.max_prefill_batch = pre;
  b.max_prefill_tokens = tokens;
  b.max_decode_batch = dec;
  b.num_qo_heads = s.hq;
  b.num_kv_heads = s.hkv;
  b.head_dim = s.d;
  return b;
}

// One workspace for several partition decode shapes: the largest of their sizes (a shape with
// more CTAs per SM -- 2 warps at head_dim 64 -- has a larger decode grid than the default).
template <class Shapes>
std::size_t workspace_for_shapes(const PodBounds& b, const Shapes& shapes) {
  std::size_t bytes = 0;
  for (const auto& sh : shapes) {
    PodOptions o;
    o.partition_decode_warps = sh.decode_warps;
    o.partition_decode_stages = sh.decode_stages;
    bytes = std::max(bytes, BatchPODAttention::workspace_size(b, o));
  }
  return bytes;
}

AttentionVariant causal_lse() {
  AttentionVariant v;
  v.mask = MaskMode::kCausal;
  v.return_lse = true;
  return v;
}

struct Config {
  Shape shape;
  int max_chunk, max_hist, max_dec, max_dkv;
};

// The shapes: GQA 32/8, 32/32, 32/4; d128 and d64; bf16 and fp16; page 16 and 1.
const Config kConfigs[] = {
    {{32, 8, 128, DType::kBFloat16, 16}, 300, 2000, 24, 3000},
    {{32, 32, 128, DType::kFloat16, 16}, 200, 1000, 12, 1500},
    {{32, 4, 128, DType::kBFloat16, 1}, 300, 1500, 24, 2000},
    {{32, 8, 64, DType::kFloat16, 1}, 300, 1500, 24, 2000},
    {{32, 4, 64, DType::kBFloat16, 16}, 400, 2500, 40, 3000},
};

class PodRandom : public ::testing::TestWithParam<int> {};

TEST_P(PodRandom, MatchesReferenceInEveryMode) {
  WEFT_REQUIRE_GPU();
  const Config& c = kConfigs[GetParam()];
  Rng rng = Rng::for_current_test(GetParam());
  const int32_t max_pre = 2, max_dec = c.max_dec;
  const int64_t tokens = 2 * c.max_chunk;
  const int64_t pages = (2 * (c.max_chunk + c.max_hist) + max_dec * c.max_dkv) / c.shape.page_size + 2 * (max_dec + 2) + 4;
  Hybrid h(c.shape, tokens, pages, max_pre, max_dec);
  const PodBounds b = bounds_of(c.shape, tokens, max_pre, max_dec);
  const AttentionVariant var = causal_lse();
  struct M {
    PodMode mode;
    PodBinding binding;
    const char* name;
    bool split = true;
    int32_t free_sms = 0;  // kPartition: pinned k (0: the planner's)
    int32_t decode_warps = 0, decode_stages = 0;  // kPartition: the decode CTA shape (0: default)
  };
  const M modes[] = {{PodMode::kFused, PodBinding::kProportional, "fused/proportional"},
                     {PodMode::kFused, PodBinding::kFiftyFifty, "fused/50:50"},
                     {PodMode::kFused, PodBinding::kStatic, "fused/static"},
                     {PodMode::kFused, PodBinding::kProportional, "fused/no-split", false},
                     {PodMode::kSerial, PodBinding::kProportional, "serial"},
                     {PodMode::kPartition, PodBinding::kProportional, "partition", false},
                     {PodMode::kPartition, PodBinding::kProportional, "partition/k64", false, 64},
                     // the partition's decode with deeper per-warp pipelines (PodOptions::
                     // partition_decode_warps / _stages): 4 warps x 3 stages, 8 x 2 (the bands'
                     // deep shape), 2 warps x 6 stages
                     {PodMode::kPartition, PodBinding::kProportional, "partition/w4s3", false, 0, 4, 3},
                     {PodMode::kPartition, PodBinding::kProportional, "partition/w8s2", false, 0, 8, 2},
                     {PodMode::kPartition, PodBinding::kProportional, "partition/k16/w2s6", false, 16, 2, 6},
                     {PodMode::kAuto, PodBinding::kProportional, "auto"}};
  DeviceBuffer ws(workspace_for_shapes(b, modes));  // one workspace for every mode
  int32_t split_merges = 0;  // merges of the split fused plans: the split + merge path ran
  int32_t partition_runs = 0;  // partition plans whose prefill is the sm90 kernel (a partition proper)
  for (int iter = 0; iter < 2; ++iter) {
    const Mix mix = random_mix(rng, c.max_chunk, c.max_hist, max_dec, c.max_dkv);
    h.load(mix, rng);
    const Hybrid::Expected expected = h.reference(var);
    for (const M& md : modes) {
      PodOptions o;
      o.mode = md.mode;
      o.binding = md.binding;
      o.prefill_split = md.split;
      o.partition_free_sms = md.free_sms;
      o.partition_decode_warps = md.decode_warps;
      o.partition_decode_stages = md.decode_stages;
      BatchPODAttention pod(b, o);
      h.poison();
      h.plan(pod, var, ws, ws.bytes());
      if (md.mode != PodMode::kAuto) {
        EXPECT_EQ(pod.plan_info().fused, md.mode == PodMode::kFused);
        EXPECT_EQ(pod.plan_info().partition, md.mode == PodMode::kPartition);
      }
      if (md.mode == PodMode::kPartition) {
        partition_runs += pod.plan_info().predicted_partition_us > 0;  // the sm90 prefill ran
        if (md.free_sms > 0) EXPECT_EQ(pod.plan_info().free_sms, md.free_sms);
        EXPECT_EQ(pod.plan_info().prefill_grid + pod.plan_info().free_sms, pod.plan_info().grid / pod.plan_info().ctas_per_sm);
        // The decode shape: the pinned one; else with a pinned k the default (4 x 2); else the
        // bands' choice, the default or the deep shape (heuristics::pod_partition_deep_decode).
        const int32_t st = pod.plan_info().decode_stages, w = pod.plan_info().decode_warps;
        if (md.decode_stages != 0) {
          EXPECT_EQ(st, md.decode_stages);
          EXPECT_EQ(w, md.decode_warps);
        } else if (md.free_sms != 0) {
          EXPECT_TRUE(w == 4 && st == 2) << w << " x " << st;
        } else {
          EXPECT_TRUE((w == 4 && st == 2) ||
                      (w == heuristics::kPodDeepDecodeWarps && st == heuristics::kPodDeepDecodeStages))
              << w << " x " << st;
        }
      }
      if (md.mode == PodMode::kFused) {
        if (md.split) split_merges += pod.plan_info().prefill_merges;
        else EXPECT_EQ(pod.plan_info().prefill_merges, 0);
      }
      h.run(pod);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      h.check(expected, c.shape.describe() + " " + md.name + " " + describe(mix));
    }
  }
  // Informational (the mixes are random); PodEdges pins a split plan.
  std::printf("[ info ] %s: %d split prefill tiles merged over the fused plans, %d sm90 partition runs\n",
              c.shape.describe().c_str(), split_merges, partition_runs);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PodRandom, ::testing::Range(0, int(sizeof(kConfigs) / sizeof(kConfigs[0]))));

// The named edge cases (FusedEdgeCases, PartitionEdgeCases).
std::vector<std::pair<Mix, AttentionVariant>> edge_cases() {
  AttentionVariant nc;
  nc.return_lse = true;
  return {
      {Mix{{1, 1}, {0, 16}, {0, 1, 17, 0}}, causal_lse()},
      {Mix{{129, 63}, {255, 1}, {33, 0, 4097 - 4000, 1}}, causal_lse()},
      {Mix{{77}, {300}, {31, 65}}, nc},
      {Mix{{}, {}, {100, 2000, 0}}, causal_lse()},
      {Mix{{200, 31}, {1000, 0}, {}}, causal_lse()},
      // A 128-token chunk after 4000 keys: with PodOptions::prefill_split its 32 tiles of ~4100
      // keys on the 2-CTA/SM grid are split and merged after the fused kernel.
      {Mix{{128}, {4000}, {64, 3000}}, causal_lse()},
  };
}

// Named edge cases in the fused kernel: q_len 1 with kv_len 1, kv_len 0 decodes (O = 0, LSE =
// -inf), lengths off every tile, a non-causal chunk, an empty prefill side, an empty decode side.
TEST(PodEdges, FusedEdgeCases) {
  WEFT_REQUIRE_GPU();
  const Shape s{32, 8, 128, DType::kBFloat16, 16};
  Rng rng = Rng::for_current_test();
  Hybrid h(s, 512, 600, 3, 8);
  const PodBounds b = bounds_of(s, 512, 3, 8);
  DeviceBuffer ws(BatchPODAttention::workspace_size(b));
  const std::vector<std::pair<Mix, AttentionVariant>> cases = edge_cases();
  for (const bool split : {false, true}) {  // the default (whole tiles) and limited splits
    PodOptions o;
    o.mode = PodMode::kFused;
    o.prefill_split = split;
    BatchPODAttention pod(b, o);
    for (const auto& [mix, var] : cases) {
      h.load(mix, rng);
      h.poison();
      h.plan(pod, var, ws, ws.bytes());
      ASSERT_TRUE(pod.plan_info().fused);
      if (mix.chunk.size() == 1 && mix.history[0] == 4000) {
        if (split) EXPECT_GT(pod.plan_info().prefill_merges, 0);
        else EXPECT_EQ(pod.plan_info().prefill_merges, 0);
      }
      h.run(pod);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      h.check(var, std::string(split ? "split " : "") + "edge " + describe(mix));
    }
  }
}

// The same edge cases in the SM partition (the planner's k and a pinned one): the capped prefill
// (sm90 where it tiles the pages) and the decode kernel on the forked stream, empty sides included.
TEST(PodEdges, PartitionEdgeCases) {
  WEFT_REQUIRE_GPU();
  const Shape s{32, 8, 128, DType::kBFloat16, 16};
  Rng rng = Rng::for_current_test();
  Hybrid h(s, 512, 600, 3, 8);
  const PodBounds b = bounds_of(s, 512, 3, 8);
  const std::vector<std::pair<Mix, AttentionVariant>> cases = edge_cases();
  struct P {
    int32_t k, decode_warps, decode_stages;  // pinned k (0: the planner's); the decode CTA shape (0: default)
  };
  const P shapes[] = {P{0, 0, 0}, P{64, 0, 0}, P{0, 4, 3}, P{0, 8, 2}, P{16, 2, 6}};
  DeviceBuffer ws(workspace_for_shapes(b, shapes));
  for (const P& pc : shapes) {
    const int32_t k = pc.k;
    PodOptions o;
    o.mode = PodMode::kPartition;
    o.partition_free_sms = k;
    o.partition_decode_warps = pc.decode_warps;
    o.partition_decode_stages = pc.decode_stages;
    BatchPODAttention pod(b, o);
    for (const auto& [mix, var] : cases) {
      h.load(mix, rng);
      h.poison();
      h.plan(pod, var, ws, ws.bytes());
      ASSERT_TRUE(pod.plan_info().partition);
      ASSERT_FALSE(pod.plan_info().fused);
      if (k > 0) EXPECT_EQ(pod.plan_info().free_sms, k);
      h.run(pod);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      h.check(var, "partition k " + std::to_string(pod.plan_info().free_sms) + " w" + std::to_string(pc.decode_warps) + "s" +
                       std::to_string(pc.decode_stages) + " edge " + describe(mix));
    }
  }
  // A k that is not a candidate is rejected at construction.
  PodOptions bad;
  bad.mode = PodMode::kPartition;
  bad.partition_free_sms = 13;
  EXPECT_EQ(test::thrown_argument([&] { BatchPODAttention x(b, bad); }), "options.partition_free_sms");
  // Decode CTA shapes out of range, or whose stages do not fit the shared memory (8 warps x 8
  // stages x 8 KB), are rejected naming the option, at construction and by workspace_size.
  for (const P& pc : {P{0, 1, 0}, P{0, 9, 0}, P{0, 0, 1}, P{0, 0, 9}, P{0, 8, 8}}) {
    PodOptions o;
    o.mode = PodMode::kPartition;
    o.partition_decode_warps = pc.decode_warps;
    o.partition_decode_stages = pc.decode_stages;
    const std::string want = pc.decode_warps == 1 || pc.decode_warps == 9 ? "options.partition_decode_warps"
                                                                          : "options.partition_decode_stages";
    EXPECT_EQ(test::thrown_argument([&] { BatchPODAttention x(b, o); }), want) << pc.decode_warps << "x" << pc.decode_stages;
    EXPECT_EQ(test::thrown_argument([&] { (void)BatchPODAttention::workspace_size(b, o); }), want);
  }
}

// One graph captured around run() in fused mode (the kernel resets its own counters) or in the SM
// partition with a pinned k (two branches: the capped prefill and the forked decode), replayed
// after re-plans with other mixes: every replay matches the reference; 20 replays of one plan are
// bitwise identical.
void graph_replay(PodMode mode, int32_t decode_warps = 0, int32_t decode_stages = 0) {
  const Shape s{32, 8, 128, DType::kBFloat16, 16};
  Rng rng = Rng::for_current_test();
  const int64_t tokens = 600;
  const int32_t max_pre = 2, max_dec = 32;
  Hybrid h(s, tokens, 4200, max_pre, max_dec);
  const PodBounds b = bounds_of(s, tokens, max_pre, max_dec);
  DeviceBuffer ws(BatchPODAttention::workspace_size(b));
  PodOptions o;
  o.mode = mode;
  if (mode == PodMode::kPartition) o.partition_free_sms = 32;
  o.partition_decode_warps = decode_warps;
  o.partition_decode_stages = decode_stages;
  BatchPODAttention pod(b, o);
  const AttentionVariant var = causal_lse();
  cudaStream_t stream;
  WEFT_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Capture shape: the largest mix (views must match the plan when run() is captured; the kernel
  // only keeps the base pointers, which every later mix shares).
  Mix first{{300, 300}, {1000, 200}, std::vector<int32_t>(max_dec, 1000)};
  h.load(first, rng);
  h.plan(pod, var, ws, ws.bytes());
  WEFT_TEST_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  WEFT_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  h.run(pod, stream);
  WEFT_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (int iter = 0; iter < 4; ++iter) {
    const Mix mix = iter == 0 ? first : random_mix(rng, 300, 1200, max_dec, 1500);
    h.load(mix, rng);
    h.plan(pod, var, ws, ws.bytes());
    WEFT_TEST_CUDA(cudaStreamSynchronize(stream));
    h.poison();
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, stream));
    WEFT_TEST_CUDA(cudaStreamSynchronize(stream));
    h.check(var, "graph replay " + std::to_string(iter) + " " + describe(mix) + " split " +
                     std::to_string(pod.plan_info().prefill_ctas) + ":" + std::to_string(pod.plan_info().decode_ctas));
  }
  // 20 replays of the last plan: the same bits each time.
  const Hybrid::Out ref_bits = h.download();
  for (int r = 0; r < 20; ++r) {
    h.poison();
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    WEFT_TEST_CUDA(cudaGraphLaunch(exec, stream));
    WEFT_TEST_CUDA(cudaStreamSynchronize(stream));
    ASSERT_TRUE(h.download() == ref_bits) << "replay " << r << " differs";
  }
  WEFT_TEST_CUDA(cudaGraphExecDestroy(exec));
  WEFT_TEST_CUDA(cudaGraphDestroy(graph));
  WEFT_TEST_CUDA(cudaStreamDestroy(stream));
}

TEST(PodGraph, ReplayAcrossMixesAndDeterminism) {
  WEFT_REQUIRE_GPU();
  graph_replay(PodMode::kFused);
}

TEST(PodGraph, PartitionReplayAcrossMixesAndDeterminism) {
  WEFT_REQUIRE_GPU();
  graph_replay(PodMode::kPartition);
}

// The same with the partition's decode at the bands' deep shape (8 warps x 2 stages,
// PodOptions::partition_decode_*).
TEST(PodGraph, PartitionDecodeShapeReplayAcrossMixesAndDeterminism) {
  WEFT_REQUIRE_GPU();
  graph_replay(PodMode::kPartition, heuristics::kPodDeepDecodeWarps, heuristics::kPodDeepDecodeStages);
}

// Bad input: weft::Error naming the argument, nothing written (outputs keep their poison).
TEST(PodNegative, RejectsAndWritesNothing) {
  WEFT_REQUIRE_GPU();
  const Shape s{32, 8, 128, DType::kBFloat16, 16};
  Rng rng = Rng::for_current_test();
  Hybrid h(s, 256, 200, 2, 4);
  PodBounds b = bounds_of(s, 256, 2, 4);
  DeviceBuffer ws(BatchPODAttention::workspace_size(b));
  PodBounds bad = b;
  bad.head_dim = 256;
  EXPECT_EQ(test::thrown_argument([&] { BatchPODAttention x(bad); }), "bounds.head_dim");
  bad = b;
  bad.num_kv_heads = 5;
  EXPECT_EQ(test::thrown_argument([&] { BatchPODAttention x(bad); }), "bounds.num_kv_heads");
  PodOptions o;
  o.mode = PodMode::kFused;
  BatchPODAttention pod(b, o);
  h.load(Mix{{100}, {50}, {10, 20}}, rng);
  const AttentionVariant var = causal_lse();
  EXPECT_EQ(test::thrown_argument([&] { h.run(pod); }), "plan");
  EXPECT_EQ(test::thrown_argument([&] { h.plan(pod, var, ws, 1024); }), "workspace");
  AttentionVariant alibi = var;
  alibi.alibi_slopes = static_cast<const float*>(ws.get());
  EXPECT_EQ(test::thrown_argument([&] { h.plan(pod, alibi, ws, ws.bytes()); }), "variant.alibi_slopes");
  AttentionVariant compiled = var;  // rejected before the pointer is read: any non-null one will do
  compiled.jit = reinterpret_cast<const jit::Variant*>(ws.get());
  EXPECT_EQ(test::thrown_argument([&] { h.plan(pod, compiled, ws, ws.bytes()); }), "variant.jit");
  std::vector<int32_t> qo_bad = {0, 300};  // 300 tokens > kv_len 150
  EXPECT_EQ(test::thrown_argument([&] {
              pod.plan(qo_bad.data(), h.pt, h.dt, s.page_size, s.dtype, var, ws.get(), ws.bytes(), nullptr);
            }),
            "prefill_qo_indptr");
  h.plan(pod, var, ws, ws.bytes());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  h.poison();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Hybrid::Out before = h.download();
  const TensorView pl = h.plse_view(), dl = h.dlse_view();
  TensorView wrong = h.pq_view();
  wrong.shape[0] += 1;
  EXPECT_EQ(test::thrown_argument([&] {
              pod.run(wrong, h.dq_view(), h.cache, h.pt, h.dt, h.pout_view(), h.dout_view(), &pl, &dl, nullptr);
            }),
            "prefill_q");
  EXPECT_EQ(test::thrown_argument([&] {
              pod.run(h.pq_view(), h.dq_view(), h.cache, h.pt, h.dt, h.pout_view(), h.dout_view(), nullptr, &dl,
                      nullptr);
            }),
            "prefill_lse");
  // A decode table whose first request has one key more or less than planned.
  std::vector<int32_t> last2 = h.d_last;
  last2[0] = last2[0] == 1 ? 2 : last2[0] - 1;
  PageTable other = h.dt;
  other.last_page_len.host = last2.data();
  EXPECT_EQ(test::thrown_argument([&] {
              pod.run(h.pq_view(), h.dq_view(), h.cache, h.pt, other, h.pout_view(), h.dout_view(), &pl, &dl,
                      nullptr);
            }),
            "decode_table");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Hybrid::Out after = h.download();
  EXPECT_TRUE(before.po == after.po && before.dout == after.dout);
  // The same object still works after the rejections.
  h.run(pod);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  h.check(var, "after rejections");
}

}  // namespace
}  // namespace weft::test_pod
