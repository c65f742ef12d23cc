// Issue 18, append_paged_kv: (1) every pointer is validated against the kernel's widest access
// (16-byte loads of new K/V rows, 16-byte stores into the pools, int32 loads of batch_indices,
// positions and the page table): a misaligned one throws weft::Error naming it, the pools stay
// byte-identical, the context stays clean, and the next valid append is bit-exact against the
// host model; (2) an empty step (nnz 0 on a batch-0 table, every array null) is a no-op eagerly
// and inside a captured graph.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "paged_scenario.h"
#include "weft/error.h"

namespace {

using weft::DType;
using weft::IndexArray;
using weft::KVLayout;
using weft::PagedKVCache;
using weft::PageTable;
using weft::TensorView;
using weft::test::PagedDevice;
using weft::test::PagedScenario;
using weft::test::PagedScenarioSpec;
using weft::test::thrown_argument;

template <class T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

// Host model of a correct append: the initial pools with every new row copied where the table says.
void expected_pools(const PagedScenario& sc, std::vector<uint16_t>& k, std::vector<uint16_t>& v) {
  k = sc.k_pool;
  v = sc.v_pool;
  for (int64_t i = 0; i < sc.nnz(); ++i)
    for (int64_t h = 0; h < sc.s.heads; ++h)
      for (int64_t d = 0; d < sc.s.head_dim; ++d) {
        k[sc.token_offset(false, sc.batch_idx[i], sc.positions[i], h) + d] = sc.new_buf[sc.new_offset(false, i, h) + d];
        v[sc.token_offset(true, sc.batch_idx[i], sc.positions[i], h) + d] = sc.new_buf[sc.new_offset(true, i, h) + d];
      }
}

struct Fixture {
  PagedScenario sc;
  PagedDevice dev;
  std::vector<uint16_t> want_k, want_v;
  // dev is built from the member sc: its table holds host pointers into the scenario's arrays.
  explicit Fixture(const PagedScenario& s) : sc(s), dev(sc) { expected_pools(sc, want_k, want_v); }
  void restore() {  // the pools' initial random contents (the "poison" a stray write would change)
    dev.k_alloc.upload(sc.k_pool.data(), sc.k_pool.size() * 2);
    dev.v_alloc.upload(sc.v_pool.data(), sc.v_pool.size() * 2);
  }
  bool pools_initial() const { return dev.k_now(sc) == sc.k_pool && dev.v_now(sc) == sc.v_pool; }
  void append_valid() { weft::append_paged_kv(dev.new_k, dev.new_v, dev.bi, dev.pos, dev.cache, dev.table, nullptr); }
};

PagedScenario scenario(uint64_t salt = 0) {
  PagedScenarioSpec s;
  s.page_size = 16;
  s.heads = 2;
  s.head_dim = 128;
  s.layout = KVLayout::kNHD;
  s.old_lens = {0, 33, 5, 16};
  s.new_lens = {20, 1, 0, 17};
  auto rng = weft::test::Rng::for_current_test(salt);
  return weft::test::make_paged_scenario(s, rng);
}

void expect_rejected(Fixture& f, const std::string& arg, const std::function<void()>& bad) {
  SCOPED_TRACE("argument " + arg);
  f.restore();
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(thrown_argument(bad), arg);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(f.pools_initial()) << "a rejected append wrote into the pools";
  f.append_valid();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context must survive the rejected call";
  EXPECT_TRUE(f.dev.k_now(f.sc) == f.want_k) << "k_pages after the valid append";
  EXPECT_TRUE(f.dev.v_now(f.sc) == f.want_v) << "v_pages after the valid append";
}

TEST(AppendHardening, MisalignedPointersAndStridesAreRejected) {
  WEFT_REQUIRE_GPU();
  Fixture f(scenario());
  PagedDevice& d = f.dev;
  const int64_t n = f.sc.nnz(), H = f.sc.s.heads, D = f.sc.s.head_dim;
  auto call = [](TensorView k, TensorView v, IndexArray bi, IndexArray pos, PagedKVCache c, PageTable t) {
    return [k, v, bi, pos, c, t] { weft::append_paged_kv(k, v, bi, pos, c, t, nullptr); };
  };
  // New rows: 16-byte loads.
  TensorView bad = d.new_k;
  bad.data = shifted(d.new_k.data, 8);
  expect_rejected(f, "new_k", call(bad, d.new_v, d.bi, d.pos, d.cache, d.table));
  bad = d.new_v;
  bad.data = shifted(d.new_v.data, 4);
  expect_rejected(f, "new_v", call(d.new_k, bad, d.bi, d.pos, d.cache, d.table));
  expect_rejected(f, "new_k",
                  call(TensorView(d.new_k.data, f.sc.s.dtype, {n, H, D}, {H * D + 4, D, 1}), d.new_v, d.bi, d.pos, d.cache, d.table));
  // Token arrays: int32 loads.
  IndexArray a = d.bi;
  a.device = shifted(d.bi.device, 2);
  expect_rejected(f, "batch_indices", call(d.new_k, d.new_v, a, d.pos, d.cache, d.table));
  a = d.pos;
  a.device = shifted(d.pos.device, 2);
  expect_rejected(f, "positions", call(d.new_k, d.new_v, d.bi, a, d.cache, d.table));
  // Pools: 16-byte stores.
  PagedKVCache c = d.cache;
  c.k_pages.data = shifted(d.cache.k_pages.data, 8);
  expect_rejected(f, "k_pages", call(d.new_k, d.new_v, d.bi, d.pos, c, d.table));
  c = d.cache;
  c.v_pages.strides[1] += 4;                     // NHD slot stride: slot 1 at +8 bytes
  c.v_pages.strides[0] += f.sc.s.page_size * 4;  // (pages still do not overlap)
  expect_rejected(f, "v_pages", call(d.new_k, d.new_v, d.bi, d.pos, c, d.table));
  // Page table: int32 loads.
  PageTable t = d.table;
  t.indptr.device = shifted(d.table.indptr.device, 2);
  expect_rejected(f, "kv_indptr", call(d.new_k, d.new_v, d.bi, d.pos, d.cache, t));
  t = d.table;
  t.indices.device = shifted(d.table.indices.device, 2);
  expect_rejected(f, "kv_indices", call(d.new_k, d.new_v, d.bi, d.pos, d.cache, t));
  t = d.table;
  t.last_page_len.device = shifted(d.table.last_page_len.device, 2);
  expect_rejected(f, "kv_last_page_len", call(d.new_k, d.new_v, d.bi, d.pos, d.cache, t));
}

// nnz 0 on a batch-0 table: every index array null (size 0), new K/V without storage. Accepted,
// the pools are untouched, eagerly and replayed from a graph (captured with a marker memset so the
// graph is not empty); then a valid append on the same context is bit-exact.
TEST(AppendHardening, EmptyStepEagerAndInAGraph) {
  WEFT_REQUIRE_GPU();
  Fixture f(scenario());
  const TensorView none(nullptr, f.sc.s.dtype, {0, f.sc.s.heads, f.sc.s.head_dim});
  const std::vector<int32_t> zero{0};
  PageTable zero_table;  // batch 0, indptr {0} with its device copy
  zero_table.indptr = {f.dev.table.indptr.device, zero.data(), 1};
  for (const PageTable& table : {PageTable{}, zero_table}) {
    EXPECT_EQ(thrown_argument([&] {
                weft::append_paged_kv(none, none, IndexArray{}, IndexArray{}, f.dev.cache, table, nullptr);
              }),
              "<no throw>");
    // Real (non-null) buffers of size 0 are a no-op too.
    const TensorView empty_k(f.dev.new_k.data, f.sc.s.dtype, {0, f.sc.s.heads, f.sc.s.head_dim});
    const IndexArray bi{f.dev.bi.device, nullptr, 0}, pos{f.dev.pos.device, nullptr, 0};
    EXPECT_EQ(thrown_argument([&] { weft::append_paged_kv(empty_k, empty_k, bi, pos, f.dev.cache, table, nullptr); }),
              "<no throw>");
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(f.pools_initial());

  cudaStream_t s;
  WEFT_TEST_CUDA(cudaStreamCreate(&s));
  weft::test::DeviceBuffer marker(4);
  WEFT_TEST_CUDA(cudaMemset(marker.get(), 0, 4));
  cudaGraph_t g;
  WEFT_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  WEFT_TEST_CUDA(cudaMemsetAsync(marker.get(), 0x5A, 4, s));
  const std::string thrown = thrown_argument(
      [&] { weft::append_paged_kv(none, none, IndexArray{}, IndexArray{}, f.dev.cache, PageTable{}, s); });
  WEFT_TEST_CUDA(cudaStreamEndCapture(s, &g));
  EXPECT_EQ(thrown, "<no throw>");
  cudaGraphExec_t exec;
  WEFT_TEST_CUDA(cudaGraphInstantiate(&exec, g, 0));
  WEFT_TEST_CUDA(cudaGraphLaunch(exec, s));
  WEFT_TEST_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(marker.to_vector<uint32_t>(1)[0], 0x5A5A5A5Au) << "the graph did not replay";
  EXPECT_TRUE(f.pools_initial()) << "the replayed empty append wrote into the pools";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);

  f.append_valid();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(f.dev.k_now(f.sc) == f.want_k);
  EXPECT_TRUE(f.dev.v_now(f.sc) == f.want_v);
}

}  // namespace
