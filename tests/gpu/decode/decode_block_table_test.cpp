// Native block tables (weft::BlockTable) in decode: the block-table run() equals the BSR run()
// BITWISE on the same pages (balanced plans and prefix-sharing packs), the work-queue schedule
// (decode/work_queue_decode.h) matches the float64 reference at every chunk including no split,
// and bad block tables are rejected with weft::Error naming the argument, before any launch.
// Tests named *Small* form the compute-sanitizer subset.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "decode/work_queue_decode.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "tests/gpu/decode/decode_batch.h"
#include "weft/decode.h"
#include "weft/error.h"

namespace weft {
namespace {

using test::DeviceBuffer;
using test::Rng;
using test::thrown_argument;
using test_decode::Batch;
using test_decode::Case;
using test_decode::check_against_reference;

// The batch's pages as a padded block table: row b holds its page ids, then padding (-7, never
// read) up to max_blocks, then `extra` more entries of stride slack.
struct Native {
  std::vector<int32_t> ids, lens;
  DeviceBuffer d_ids, d_lens;
  BlockTable t;
  Native(const Batch& bt, int32_t extra) {
    const int32_t B = int32_t(bt.c.lens.size());
    int32_t maxb = 1;
    for (int32_t b = 0; b < B; ++b) maxb = std::max(maxb, bt.indptr[b + 1] - bt.indptr[b]);
    const int64_t stride = maxb + extra;
    ids.assign(size_t(std::max<int64_t>(1, B * stride)), -7);
    for (int32_t b = 0; b < B; ++b)
      for (int32_t i = bt.indptr[b]; i < bt.indptr[b + 1]; ++i) ids[b * stride + i - bt.indptr[b]] = bt.indices[i];
    lens = bt.c.lens;
    d_ids = DeviceBuffer::from(ids);
    d_lens = DeviceBuffer::from(lens.empty() ? std::vector<int32_t>{0} : lens);
    t.batch_size = B;
    t.max_blocks = maxb;
    t.row_stride = stride;
    t.block_ids = {d_ids.as<int32_t>(), ids.data(), int64_t(ids.size())};
    t.seq_lens = {d_lens.as<int32_t>(), lens.data(), B};
  }
};

std::vector<uint16_t> out_bits(const Batch& bt) {
  return bt.dout.to_vector<uint16_t>(bt.c.lens.size() * bt.c.hq * bt.c.d);
}

void expect_csr_equals_block_table(const Case& c, Rng& rng, bool share) {
  Batch bt(c, rng);
  if (share && c.lens.size() >= 3) {  // rows 1 and 2 share row 0's first pages
    const int32_t p0 = bt.indptr[1] - bt.indptr[0];
    for (int r : {1, 2}) {
      const int32_t n = std::min(p0, bt.indptr[r + 1] - bt.indptr[r]) - 1;
      for (int32_t i = 0; i < n; ++i) bt.indices[bt.indptr[r] + i] = bt.indices[i];
    }
    bt.d_indices = DeviceBuffer::from(bt.indices);
    bt.table.indices.device = bt.d_indices.as<int32_t>();
  }
  Native nt(bt, 3);
  const int32_t B = int32_t(c.lens.size());
  DecodeOptions o;
  o.path = c.path;
  o.share_prefixes = share;
  o.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
  const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, o);
  DeviceBuffer ws(ws_bytes);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, o);
  TensorView* lse = c.with_lse ? &bt.tlse : nullptr;
  // BSR
  w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
  bt.dout.poison();
  bt.dlse.poison();
  w.run(bt.tq, bt.cache, bt.table, bt.tout, lse, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> csr_o = out_bits(bt);
  const std::vector<float> csr_l = bt.lse();
  // Block table
  w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
  bt.dout.poison();
  bt.dlse.poison();
  w.run(bt.tq, bt.cache, nt.t, bt.tout, lse, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out_bits(bt), csr_o) << c.describe();
  if (c.with_lse) {
    const std::vector<float> l = bt.lse();
    EXPECT_EQ(std::memcmp(l.data(), csr_l.data(), l.size() * 4), 0) << c.describe();
  }
  check_against_reference(bt);
}

TEST(DecodeBlockTableSmall, EqualsCsrBitwise) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {64, 128, 256})
    for (DecodePath path : {DecodePath::kTensorCore, DecodePath::kCudaCore}) {
      Case c;
      c.d = d;
      c.hq = 8;
      c.hkv = 2;
      c.path = path;
      c.dtype = d == 128 ? DType::kBFloat16 : DType::kFloat16;
      c.page_size = d == 64 ? 1 : 16;
      c.layout = d == 256 ? KVLayout::kHND : KVLayout::kNHD;
      c.lens = {1, 0, 5000, 17, 300, 4096, 33};
      SCOPED_TRACE(c.describe());
      expect_csr_equals_block_table(c, rng, false);
    }
}

TEST(DecodeBlockTableSmall, PrefixShareEqualsCsrBitwise) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.hq = 32;
  c.hkv = 8;
  c.lens = {1200, 1100, 900, 0, 77};
  c.path = DecodePath::kTensorCore;
  SCOPED_TRACE(c.describe());
  expect_csr_equals_block_table(c, rng, true);
}

TEST(DecodeBlockTable, LongRaggedEqualsCsrBitwise) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.hq = 32;
  c.hkv = 8;
  c.lens = {32768, 1, 9000, 16383, 0, 2048, 40000, 5};
  SCOPED_TRACE(c.describe());
  expect_csr_equals_block_table(c, rng, false);
}

// The work queue on a block table at several chunks (0: no split), against the reference; the
// same plan twice gives the same bits; kv_len 0 rows exit with their neutral state.
TEST(DecodeWorkQueueSmall, MatchesReference) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  for (int d : {64, 128, 256}) {
    Case c;
    c.d = d;
    c.hq = d == 64 ? 16 : 32;
    c.hkv = d == 64 ? 1 : 8;  // GQA 16 and 4
    c.dtype = d == 128 ? DType::kBFloat16 : DType::kFloat16;
    c.page_size = d == 256 ? 1 : 16;
    c.lens = {0, 1, 4100, 17, 1024, 0, 999, 2049};
    SCOPED_TRACE(c.describe());
    Batch bt(c, rng);
    Native nt(bt, 2);
    const int32_t B = int32_t(c.lens.size());
    const int32_t max_tasks = 8192;  // chunk 16 at D256: 518 tasks per head x 8 heads
    const size_t ws_bytes = decode::WorkQueueDecode::workspace_size(B, c.hkv, c.d, max_tasks);
    DeviceBuffer ws(ws_bytes);
    decode::WorkQueueDecode wq(B, c.hq, c.hkv, c.d, max_tasks);
    for (int32_t chunk : {0, 256, 1024, 16}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      wq.plan(nt.t, chunk, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
      bt.dout.poison();
      bt.dlse.poison();
      wq.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      check_against_reference(bt);
      const std::vector<uint16_t> first = out_bits(bt);
      bt.dout.poison();
      wq.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(out_bits(bt), first) << "not deterministic";
    }
  }
}

// Bad block tables: weft::Error naming the argument, outputs untouched (poisoned bits stay).
TEST(DecodeBlockTableSmall, RejectsBadTables) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.lens = {40, 70, 3};
  Batch bt(c, rng);
  const int32_t B = 3;
  const size_t ws_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d);
  DeviceBuffer ws(ws_bytes);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d);
  const size_t wq_bytes = decode::WorkQueueDecode::workspace_size(B, c.hkv, c.d, 64);
  DeviceBuffer wws(wq_bytes);
  decode::WorkQueueDecode wq(B, c.hq, c.hkv, c.d, 64);
  auto plan_run = [&](Native& nt) {
    w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
    w.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
  };
  auto plan_run_wq = [&](Native& nt) {
    wq.plan(nt.t, 32, c.page_size, c.dtype, c.layout, c.var, wws.get(), wq_bytes, nullptr);
    wq.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
  };
  bt.dout.poison();
  const std::vector<uint16_t> poisoned = out_bits(bt);
  for (auto* f : {+[](Native& n) { n.ids[1] = int32_t(1000000); },                // id >= num_pages
                  +[](Native& n) { n.ids[n.t.row_stride] = -1; }}) {               // negative id
    Native nt(bt, 1);
    f(nt);
    EXPECT_EQ(thrown_argument([&] { plan_run(nt); }), "table.block_ids");
    EXPECT_EQ(thrown_argument([&] { plan_run_wq(nt); }), "table.block_ids");
  }
  {
    Native nt(bt, 1);
    nt.lens[1] = nt.t.max_blocks * c.page_size + 1;  // row shorter than its length needs
    EXPECT_EQ(thrown_argument([&] { plan_run(nt); }), "table.seq_lens");
    EXPECT_EQ(thrown_argument([&] { plan_run_wq(nt); }), "table.seq_lens");
  }
  {
    Native nt(bt, 0);
    nt.t.row_stride = nt.t.max_blocks - 1;  // stride too small
    EXPECT_EQ(thrown_argument([&] { plan_run(nt); }), "table.row_stride");
    EXPECT_EQ(thrown_argument([&] { plan_run_wq(nt); }), "table.row_stride");
  }
  {
    Native nt(bt, 1);
    w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), ws_bytes, nullptr);
    nt.lens[0] += 1;  // the plan's lengths no longer match
    EXPECT_EQ(thrown_argument([&] { w.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr); }), "table.seq_lens");
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out_bits(bt), poisoned) << "a rejected call wrote the output";
}


// DecodeOptions::route, the public face of the work queue and the router: kWorkQueue / kNoSplit
// give the bits of WorkQueueDecode at the same chunk; kAuto follows its table (a table that
// makes one option cheapest plans that option: the work queue's bits, or the balanced route's);
// misuse is rejected naming the option or argument, before any launch.
TEST(DecodeRouteSmall, PublicRoutes) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;  // d128 bf16 GQA 4 (the shape of the router table below)
  c.d = 128;
  c.hq = 32;
  c.hkv = 8;
  c.dtype = DType::kBFloat16;
  c.lens = {0, 1, 4100, 17, 1024, 999, 2049};
  Batch bt(c, rng);
  Native nt(bt, 2);
  const int32_t B = int32_t(c.lens.size());
  auto bits_of = [&](auto&& plan_run) {
    bt.dout.poison();
    bt.dlse.poison();
    plan_run();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return out_bits(bt);
  };
  // References: the internal work queue at 256 and 0, the balanced wrapper.
  const int32_t max_tasks = 2048;
  const size_t wq_bytes = decode::WorkQueueDecode::workspace_size(B, c.hkv, c.d, max_tasks);
  DeviceBuffer wws(wq_bytes);
  decode::WorkQueueDecode wq(B, c.hq, c.hkv, c.d, max_tasks);
  auto wq_bits = [&](int32_t chunk) {
    return bits_of([&] {
      wq.plan(nt.t, chunk, c.page_size, c.dtype, c.layout, c.var, wws.get(), wq_bytes, nullptr);
      wq.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
    });
  };
  const std::vector<uint16_t> ref256 = wq_bits(256), ref0 = wq_bits(0);
  const size_t bal_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d);
  DeviceBuffer bws(bal_bytes);
  BatchDecodeWrapper bal(B, c.hq, c.hkv, c.d);
  const std::vector<uint16_t> ref_bal = bits_of([&] {
    bal.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, bws.get(), bal_bytes, nullptr);
    bal.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
  });
  check_against_reference(bt);

  auto routed_bits = [&](const DecodeOptions& o, int32_t want_route, int32_t want_chunk) {
    const size_t bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, o);
    DeviceBuffer ws(bytes);
    BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, o);
    std::vector<uint16_t> bits = bits_of([&] {
      w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), bytes, nullptr);
      w.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
    });
    EXPECT_EQ(w.plan_info().route, want_route);
    EXPECT_EQ(w.plan_info().route_chunk, want_chunk);
    return bits;
  };
  DecodeOptions o;
  o.route = DecodeRoute::kWorkQueue;
  o.work_queue_chunk = 256;
  EXPECT_EQ(routed_bits(o, int32_t(DecodeRoute::kWorkQueue), 256), ref256);
  o.route = DecodeRoute::kNoSplit;
  EXPECT_EQ(routed_bits(o, int32_t(DecodeRoute::kNoSplit), 0), ref0);
  // kAuto: a table whose only cost is the constant term (coef[0]).
  auto table = [](double bal_c, double wq_c) {
    std::ostringstream t;
    t << "{\"gpu\": \"test\", \"num_kv_heads\": 8, \"group_size\": 4, \"head_dim\": 128, \"slots\": 264,"
      << " \"router_us\": 0.3, \"calibration\": \"test\", \"options\": ["
      << "{\"name\": \"balanced\", \"route\": \"balanced\", \"chunk\": 0, \"coef\": [" << bal_c << ", 0, 0, 0, 0]},"
      << "{\"name\": \"work_queue/c256\", \"route\": \"work_queue\", \"chunk\": 256, \"coef\": [" << wq_c
      << ", 0, 0, 0, 0]}]}";
    return t.str();
  };
  o.route = DecodeRoute::kAuto;
  o.router_table = table(100, 1);
  EXPECT_EQ(routed_bits(o, int32_t(DecodeRoute::kWorkQueue), 256), ref256);
  o.router_table = table(1, 100);
  EXPECT_EQ(routed_bits(o, int32_t(DecodeRoute::kBalanced), 0), ref_bal);
  // Too few tasks for the work queue (max_tasks 4): kAuto falls back to the balanced plan.
  o.router_table = table(100, 1);
  o.max_tasks = 4;
  EXPECT_EQ(routed_bits(o, int32_t(DecodeRoute::kBalanced), 0), ref_bal);

  // Misuse.
  auto build = [&](const DecodeOptions& opt) { BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, opt); };
  DecodeOptions bad;
  bad.route = DecodeRoute::kAuto;
  bad.router_table = "{}";
  EXPECT_EQ(thrown_argument([&] { build(bad); }), "options.router_table");
  bad.router_table = table(1, 1);
  EXPECT_EQ(thrown_argument([&] { BatchDecodeWrapper w(B, 16, 8, 128, bad); }), "options.router_table");  // group 2
  bad.share_prefixes = true;
  bad.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
  bad.route = DecodeRoute::kWorkQueue;  // share_prefixes combines with kAuto only
  EXPECT_EQ(thrown_argument([&] { build(bad); }), "options.route");
  DecodeOptions chunk_bad;
  chunk_bad.route = DecodeRoute::kWorkQueue;
  chunk_bad.work_queue_chunk = 100;
  EXPECT_EQ(thrown_argument([&] { build(chunk_bad); }), "options.work_queue_chunk");
  DecodeOptions wqo;
  wqo.route = DecodeRoute::kWorkQueue;
  const size_t bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, wqo);
  DeviceBuffer ws(bytes);
  BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, wqo);
  EXPECT_EQ(thrown_argument([&] {
              w.plan(bt.table, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), bytes, nullptr);
            }),
            "options.route");
  EXPECT_EQ(thrown_argument([&] {
              w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), bal_bytes, nullptr);
            }),
            "workspace");
  w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws.get(), bytes, nullptr);
  bt.dout.poison();
  const std::vector<uint16_t> poisoned = out_bits(bt);
  EXPECT_EQ(thrown_argument([&] { w.run(bt.tq, bt.cache, bt.table, bt.tout, &bt.tlse, nullptr); }), "table");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out_bits(bt), poisoned) << "a rejected call wrote the output";
}

// kAuto with share_prefixes: its persistent candidate is the prefix-sharing plan, taken only
// where rows share leading pages (the wrapper estimates the shared keys from the rows): on rows
// that share, a table where prefix sharing is cheapest gives the plain prefix-sharing wrapper's
// bits (packs planned); on rows that share nothing, the work queue's.
TEST(DecodeRouteSmall, AutoWithPrefixSharing) {
  WEFT_REQUIRE_GPU();
  Rng rng = Rng::for_current_test();
  Case c;
  c.d = 128;
  c.hq = 32;
  c.hkv = 8;
  c.dtype = DType::kBFloat16;
  c.lens = {1000, 900, 700, 50};
  const std::string table =
      "{\"gpu\": \"test\", \"num_kv_heads\": 8, \"group_size\": 4, \"head_dim\": 128, \"slots\": 264,"
      " \"router_us\": 0.3, \"calibration\": \"test\", \"options\": ["
      "{\"name\": \"balanced\", \"route\": \"balanced\", \"chunk\": 0, \"coef\": [0.5, 0, 0, 0, 0]},"
      "{\"name\": \"work_queue/c256\", \"route\": \"work_queue\", \"chunk\": 256, \"coef\": [10, 0, 0, 0, 0]},"
      "{\"name\": \"prefix_share\", \"route\": \"prefix_share\", \"chunk\": 0, \"coef\": [1, 0, 0, 0, 0]}]}";
  const int32_t B = int32_t(c.lens.size());
  // One kAuto wrapper across steps, as a serving loop holds it: shared, unshared, shared (a lazy
  // update of the first prefix-sharing plan, the balanced twin in between), unshared. The table
  // ranks balanced (0.5) < prefix_share (1) < work_queue c256 (10): with share_prefixes the step
  // whose rows share pages takes prefix sharing (balanced is not its candidate), the step whose
  // rows share none the balanced plan; each equals the fixed route's wrapper bitwise.
  DecodeOptions autos;
  autos.route = DecodeRoute::kAuto;
  autos.share_prefixes = true;
  autos.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
  autos.router_table = table;
  const size_t auto_bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, autos);
  DeviceBuffer auto_ws(auto_bytes);
  BatchDecodeWrapper aw(B, c.hq, c.hkv, c.d, autos);
  int step = 0;
  for (bool shared : {true, false, true, false}) {
    SCOPED_TRACE(std::string(shared ? "rows share pages" : "no shared pages") + ", step " + std::to_string(step++));
    Batch bt(c, rng);
    if (shared) {  // rows 1 and 2 start with row 0's pages (all but their last page)
      for (int r : {1, 2}) {
        const int32_t n = std::min(bt.indptr[1] - bt.indptr[0], bt.indptr[r + 1] - bt.indptr[r]) - 1;
        for (int32_t i = 0; i < n; ++i) bt.indices[bt.indptr[r] + i] = bt.indices[i];
      }
      bt.d_indices = DeviceBuffer::from(bt.indices);
      bt.table.indices.device = bt.d_indices.as<int32_t>();
    }
    Native nt(bt, 1);
    auto run_on = [&](BatchDecodeWrapper& w, void* ws, size_t bytes, DecodePlanInfo* info) {
      w.plan(nt.t, c.hq, c.hkv, c.d, c.page_size, c.dtype, c.layout, c.var, ws, bytes, nullptr);
      bt.dout.poison();
      bt.dlse.poison();
      w.run(bt.tq, bt.cache, nt.t, bt.tout, &bt.tlse, nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      *info = w.plan_info();
      return out_bits(bt);
    };
    auto run_with = [&](const DecodeOptions& o, DecodePlanInfo* info) {
      const size_t bytes = BatchDecodeWrapper::workspace_size(B, c.hq, c.hkv, c.d, o);
      DeviceBuffer ws(bytes);
      BatchDecodeWrapper w(B, c.hq, c.hkv, c.d, o);
      return run_on(w, ws.get(), bytes, info);
    };
    DecodePlanInfo ai;
    const std::vector<uint16_t> got = run_on(aw, auto_ws.get(), auto_bytes, &ai);
    check_against_reference(bt);
    DecodeOptions ref_opt;  // shared: the prefix-sharing plan; else the default balanced plan
    ref_opt.share_prefixes = shared;
    ref_opt.prefix_cost_model = false;  // the sharing plan under test, not the cost model's choice
    DecodePlanInfo ri;
    EXPECT_EQ(run_with(ref_opt, &ri), got);
    EXPECT_EQ(ai.route, int32_t(DecodeRoute::kBalanced));
    EXPECT_EQ(ai.prefix_sharing, shared);
    EXPECT_EQ(ai.num_packs, ri.num_packs);  // the same prefix-sharing plan (or none)
    EXPECT_EQ(ai.num_items, ri.num_items);
    if (shared) EXPECT_GT(ai.num_packs, 0);
    // The plan made from a block table is run with run(BlockTable) only.
    if (!shared) EXPECT_EQ(thrown_argument([&] { aw.run(bt.tq, bt.cache, bt.table, bt.tout, &bt.tlse, nullptr); }), "table");
  }
}

}  // namespace
}  // namespace weft
