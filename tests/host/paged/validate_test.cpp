// validate_paged_kv, kv_len_of and the layout accessors: each class of bad input throws
// weft::Error naming the offending argument.
#include <gtest/gtest.h>

#include <climits>

#include "common/test_util.h"
#include "paged_fixture.h"

namespace {

using weft::DType;
using weft::KVLayout;
using weft::TensorView;
using weft::test::fake_ptr;
using weft::test::PagedFixture;
using weft::test::thrown_argument;

constexpr const char* kNoThrow = "<no throw>";

TEST(PagedValidate, AcceptsValidTableInBothLayouts) {
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      for (int64_t d : {64, 128, 256}) {
        PagedFixture f;
        f.layout = layout;
        f.dtype = dt;
        f.head_dim = d;
        EXPECT_EQ(f.validate(), kNoThrow) << weft::kv_layout_name(layout) << " d=" << d;
      }
    }
  }
}

TEST(PagedValidate, AcceptsEmptyBatchAndEmptyRequests) {
  PagedFixture f;
  f.indptr = {0};
  f.indices = {};
  f.last = {};
  EXPECT_EQ(f.validate(), kNoThrow);
  f.indptr = {0, 0, 0};
  f.last = {0, 0};
  EXPECT_EQ(f.validate(), kNoThrow);
}

TEST(PagedValidate, IndptrMustStartAtZero) {
  PagedFixture f;
  f.indptr = {1, 2, 2, 5};
  f.indices = {3, 1, 0, 7, 4};
  EXPECT_EQ(f.validate(), "kv_indptr");
}

TEST(PagedValidate, IndptrMustBeMonotonic) {
  PagedFixture f;
  f.indptr = {0, 3, 2, 5};
  EXPECT_EQ(f.validate(), "kv_indptr");
}

TEST(PagedValidate, IndptrSizeMustBeBatchPlusOne) {
  PagedFixture f;
  weft::PageTable t = f.table();
  t.indptr.size = 3;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_indptr");
}

TEST(PagedValidate, IndicesSizeMustMatchIndptrLast) {
  PagedFixture f;
  f.indices = {3, 1, 0, 7};  // indptr says 5
  EXPECT_EQ(f.validate(), "kv_indices");
  f.indices = {3, 1, 0, 7, 4, 5};
  EXPECT_EQ(f.validate(), "kv_indices");
}

TEST(PagedValidate, PageIdAtOrAboveNumPages) {
  PagedFixture f;
  f.indices[4] = 8;  // num_pages = 8
  EXPECT_EQ(f.validate(), "kv_indices");
  f.indices[4] = INT32_MAX;
  EXPECT_EQ(f.validate(), "kv_indices");
}

TEST(PagedValidate, NegativePageId) {
  PagedFixture f;
  f.indices[0] = -1;
  EXPECT_EQ(f.validate(), "kv_indices");
}

TEST(PagedValidate, LastPageLenZeroWithPages) {
  PagedFixture f;
  f.last[0] = 0;
  EXPECT_EQ(f.validate(), "kv_last_page_len");
}

TEST(PagedValidate, LastPageLenAbovePageSize) {
  PagedFixture f;
  f.last[2] = 17;
  EXPECT_EQ(f.validate(), "kv_last_page_len");
  f.last[2] = -3;
  EXPECT_EQ(f.validate(), "kv_last_page_len");
}

TEST(PagedValidate, LastPageLenNonZeroWithoutPages) {
  PagedFixture f;
  f.last[1] = 1;
  EXPECT_EQ(f.validate(), "kv_last_page_len");
}

TEST(PagedValidate, LastPageLenSizeMismatch) {
  PagedFixture f;
  weft::PageTable t = f.table();
  t.last_page_len.size = 2;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_last_page_len");
}

TEST(PagedValidate, MissingHostMirrors) {
  PagedFixture f;
  weft::PageTable t = f.table();
  t.indptr.host = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_indptr");
  t = f.table();
  t.indices.host = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_indices");
  t = f.table();
  t.last_page_len.host = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_last_page_len");
}

TEST(PagedValidate, MissingDevicePointers) {
  PagedFixture f;
  weft::PageTable t = f.table();
  t.indptr.device = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_indptr");
  t = f.table();
  t.indices.device = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_indices");
  t = f.table();
  t.last_page_len.device = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "kv_last_page_len");
  // Empty arrays need no pointers at all.
  f.indptr = {0, 0};
  f.indices = {};
  f.last = {0};
  t = f.table();
  t.indices.device = nullptr;
  t.indices.host = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), kNoThrow);
}

TEST(PagedValidate, NegativeBatchSize) {
  PagedFixture f;
  weft::PageTable t = f.table();
  t.batch_size = -1;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(f.cache(), t); }), "batch_size");
}

TEST(PagedValidate, UnsupportedHeadDim) {
  for (int64_t d : {96, 32, 512}) {  // all keep 16-byte rows: head_dim itself is what fails
    PagedFixture f;
    f.head_dim = d;
    EXPECT_EQ(f.validate(), "head_dim") << d;
  }
}

TEST(PagedValidate, PoolDtypes) {
  PagedFixture f;
  f.dtype = DType::kFloat32;
  EXPECT_EQ(f.validate(), "k_pages");
  PagedFixture g;
  weft::PagedKVCache c = g.cache();
  c.v_pages.dtype = DType::kFloat16;  // k is bf16
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, g.table()); }), "v_pages");
}

TEST(PagedValidate, PoolShapes) {
  PagedFixture f;
  weft::PagedKVCache c = f.cache();
  c.v_pages = TensorView(fake_ptr(1), DType::kBFloat16, {8, 16, 4, 128});
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "v_pages");
  c = f.cache();
  c.k_pages = TensorView(fake_ptr(0), DType::kBFloat16, {8, 16, 256});
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "k_pages");
}

TEST(PagedValidate, MisalignedPools) {
  PagedFixture f;
  weft::PagedKVCache c = f.cache();
  c.k_pages.data = static_cast<char*>(c.k_pages.data) + 8;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "k_pages");
  c = f.cache();  // slot stride of 132 elements = 264 bytes: rows not 16-byte aligned
  c.v_pages = TensorView(fake_ptr(1), DType::kBFloat16, {8, 16, 2, 128}, {16 * 2 * 132, 2 * 132, 132, 1});
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "v_pages");
  c = f.cache();  // inner stride must be 1
  c.k_pages.strides = {8 * 16 * 2 * 128 * 2, 16 * 2 * 128 * 2, 128 * 2, 2};
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "k_pages");
}

TEST(PagedValidate, PoolsMustBeOnDeviceAndNonNull) {
  PagedFixture f;
  weft::PagedKVCache c = f.cache();
  c.k_pages.device = weft::Device::kCPU;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "k_pages");
  c = f.cache();
  c.v_pages.data = nullptr;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "v_pages");
}

TEST(PagedValidate, OverlappingPoolStridesRejected) {
  PagedFixture f;
  weft::PagedKVCache c = f.cache();
  c.k_pages.strides[0] = 0;  // every page aliases page 0
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "k_pages");
  c = f.cache();
  c.v_pages.strides[1] = 128;  // slots overlap heads
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "v_pages");
  c = f.cache();
  c.v_pages.strides[2] = -128;
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "v_pages");
}

TEST(PagedValidate, InterleavedKVAllocationAccepted) {
  // One allocation [num_pages, 2, page_size, heads, head_dim]: K = [:, 0], V = [:, 1].
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    PagedFixture f;
    f.layout = layout;
    weft::PagedKVCache c = f.cache();
    const int64_t page = f.page_size * f.heads * f.head_dim;
    for (TensorView* t : {&c.k_pages, &c.v_pages}) t->strides[0] = 2 * page;
    c.v_pages.data = static_cast<char*>(c.k_pages.data) + page * 2;
    EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), kNoThrow);
  }
}

TEST(PagedValidate, BadLayoutPageSizeHeads) {
  PagedFixture f;
  weft::PagedKVCache c = f.cache();
  c.layout = static_cast<KVLayout>(7);
  EXPECT_EQ(thrown_argument([&] { weft::validate_paged_kv(c, f.table()); }), "layout");
  PagedFixture g;
  g.page_size = 0;
  g.indptr = {0, 0, 0, 0};
  g.indices = {};
  g.last = {0, 0, 0};
  EXPECT_EQ(g.validate(), "page_size");
  PagedFixture h;
  h.heads = 0;
  EXPECT_EQ(h.validate(), "num_kv_heads");
}

TEST(PagedLayout, AccessorsAndNames) {
  PagedFixture f;
  f.num_pages = 5;
  f.page_size = 3;
  f.heads = 4;
  f.head_dim = 64;
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    f.layout = layout;
    const weft::PagedKVCache c = f.cache();
    EXPECT_EQ(c.num_pages(), 5);
    EXPECT_EQ(c.page_size(), 3);
    EXPECT_EQ(c.num_kv_heads(), 4);
    EXPECT_EQ(c.head_dim(), 64);
  }
  EXPECT_STREQ(weft::kv_layout_name(KVLayout::kNHD), "NHD");
  EXPECT_STREQ(weft::kv_layout_name(KVLayout::kHND), "HND");
}

TEST(PagedLayout, KvLenOf) {
  PagedFixture f;
  const weft::PageTable t = f.table();
  EXPECT_EQ(weft::kv_len_of(t, 16, 0), 21);
  EXPECT_EQ(weft::kv_len_of(t, 16, 1), 0);
  EXPECT_EQ(weft::kv_len_of(t, 16, 2), 48);
  EXPECT_EQ(weft::kv_len_of(t, 1, 2), 2 + 16);  // no validation: plain formula
}

// Property: random valid tables pass; one random corruption is caught and named.
TEST(PagedValidate, RandomTablesAndSingleCorruptions) {
  auto rng = weft::test::Rng::for_current_test();
  for (int iter = 0; iter < 300; ++iter) {
    PagedFixture f;
    f.page_size = rng.randint(1, 64);
    f.num_pages = rng.randint(1, 40);
    const int batch = static_cast<int>(rng.randint(0, 6));
    f.indptr = {0};
    f.indices.clear();
    f.last.clear();
    for (int b = 0; b < batch; ++b) {
      const int pages = static_cast<int>(rng.randint(0, 5));
      for (int i = 0; i < pages; ++i) f.indices.push_back(static_cast<int32_t>(rng.randint(0, f.num_pages - 1)));
      f.indptr.push_back(static_cast<int32_t>(f.indices.size()));
      f.last.push_back(pages ? static_cast<int32_t>(rng.randint(1, f.page_size)) : 0);
    }
    ASSERT_EQ(f.validate(), kNoThrow) << "iter " << iter;
    for (int b = 0; b < batch; ++b) {
      const int64_t pages = f.indptr[b + 1] - f.indptr[b];
      EXPECT_EQ(weft::kv_len_of(f.table(), f.page_size, b), pages ? (pages - 1) * f.page_size + f.last[b] : 0);
    }
    PagedFixture bad = f;
    std::string expect;
    switch (rng.randint(0, 2)) {
      case 0:
        if (bad.indices.empty()) continue;
        bad.indices[rng.randint(0, bad.indices.size() - 1)] =
            rng.randint(0, 1) ? static_cast<int32_t>(bad.num_pages + rng.randint(0, 3)) : -1;
        expect = "kv_indices";
        break;
      case 1: {
        if (batch == 0) continue;
        const int b = static_cast<int>(rng.randint(0, batch - 1));
        bad.last[b] = bad.indptr[b + 1] > bad.indptr[b] ? static_cast<int32_t>(bad.page_size + 1) : 1;
        expect = "kv_last_page_len";
        break;
      }
      default:
        bad.indptr[0] = 1;
        expect = "kv_indptr";
    }
    EXPECT_EQ(bad.validate(), expect) << "iter " << iter;
  }
}

}  // namespace
