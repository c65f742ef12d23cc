// Issue 18 (host, no GPU): every device pointer validate_paged_kv and append_paged_kv receive is
// checked against the alignment its kernels assume, and an empty step (batch 0, nnz 0) with
// size-0 null index arrays is accepted. Device pointers are fake: validation never dereferences.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "paged/append_validate.h"
#include "paged_fixture.h"

namespace {

using weft::DType;
using weft::IndexArray;
using weft::KVLayout;
using weft::PagedKVCache;
using weft::PageTable;
using weft::TensorView;
using weft::test::fake_idx;
using weft::test::fake_ptr;
using weft::test::PagedFixture;
using weft::test::thrown_argument;

constexpr const char* kNoThrow = "<no throw>";

template <class T>
T* shifted(T* p, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

std::string validate(const PagedKVCache& c, const PageTable& t) {
  return thrown_argument([&] { weft::validate_paged_kv(c, t); });
}

// Pools: 16-byte cp.async loads (decode, prefill) and 16-byte stores (append) of every row.
TEST(PagedHardening, PoolPointersAndStridesKeepEveryRow16ByteAligned) {
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND}) {
    PagedFixture f;
    f.layout = layout;
    for (int off : {2, 4, 8}) {
      PagedKVCache c = f.cache();
      c.k_pages.data = shifted(c.k_pages.data, off);
      EXPECT_EQ(validate(c, f.table()), "k_pages") << off;
      c = f.cache();
      c.v_pages.data = shifted(c.v_pages.data, off);
      EXPECT_EQ(validate(c, f.table()), "v_pages") << off;
    }
    // Each outer stride in turn set to a non-multiple of 8 elements (16 bytes): page, then dims 1, 2.
    for (int d = 0; d < 3; ++d) {
      PagedKVCache c = f.cache();
      c.k_pages.strides[d] += 4;  // +8 bytes: row 1 of that dimension lands off the 16-byte grid
      // Strides that grow by 4 still do not overlap (the sorted-coverage rule): only alignment fails.
      EXPECT_EQ(validate(c, f.table()), "k_pages") << "dim " << d;
    }
  }
}

// Index arrays: int32 loads. Every device copy is checked, also at size 0 when a pointer is given.
TEST(PagedHardening, IndexArrayDevicePointersMustBeInt32Aligned) {
  PagedFixture f;
  PageTable t = f.table();
  t.indptr.device = shifted(t.indptr.device, 2);
  EXPECT_EQ(validate(f.cache(), t), "kv_indptr");
  t = f.table();
  t.indices.device = shifted(t.indices.device, 2);
  EXPECT_EQ(validate(f.cache(), t), "kv_indices");
  t = f.table();
  t.last_page_len.device = shifted(t.last_page_len.device, 1);
  EXPECT_EQ(validate(f.cache(), t), "kv_last_page_len");
  // Size 0 (all requests empty: no page ids) with a misaligned pointer: rejected, a null one is fine.
  f.indptr = {0, 0, 0};
  f.indices = {};
  f.last = {0, 0};
  t = f.table();
  t.indices.device = shifted(fake_idx(1), 2);
  EXPECT_EQ(validate(f.cache(), t), "kv_indices");
  t.indices.device = nullptr;
  t.indices.host = nullptr;
  EXPECT_EQ(validate(f.cache(), t), kNoThrow);
}

// An empty step: batch 0, indptr {0} or no array at all, no other arrays, no pointers.
TEST(PagedHardening, EmptyBatchWithNullArraysIsAccepted) {
  PagedFixture f;
  PageTable t;  // batch 0, every array {nullptr, nullptr, 0}
  EXPECT_EQ(validate(f.cache(), t), kNoThrow);
  const std::vector<int32_t> zero{0};
  t.indptr = {nullptr, zero.data(), 1};  // {0} on the host, no device copy (nothing reads it)
  EXPECT_EQ(validate(f.cache(), t), kNoThrow);
  t.indptr = {fake_idx(0), zero.data(), 1};
  EXPECT_EQ(validate(f.cache(), t), kNoThrow);
  // Empty pools without storage are fine too.
  PagedKVCache c = f.cache();
  c.k_pages = TensorView(nullptr, DType::kBFloat16, {0, 16, 2, 128});
  c.v_pages = TensorView(nullptr, DType::kBFloat16, {0, 16, 2, 128});
  EXPECT_EQ(validate(c, PageTable{}), kNoThrow);
  // Still rejected: a wrong size, a {1}, a missing host mirror of a given entry, misaligned device.
  t.indptr = {fake_idx(0), zero.data(), 2};
  EXPECT_EQ(validate(f.cache(), t), "kv_indptr");
  const std::vector<int32_t> one{1};
  t.indptr = {fake_idx(0), one.data(), 1};
  EXPECT_EQ(validate(f.cache(), t), "kv_indptr");
  t.indptr = {fake_idx(0), nullptr, 1};
  EXPECT_EQ(validate(f.cache(), t), "kv_indptr");
  t.indptr = {shifted(fake_idx(0), 2), zero.data(), 1};
  EXPECT_EQ(validate(f.cache(), t), "kv_indptr");
  // A batch with requests still needs its arrays.
  t = f.table();
  t.indptr = {nullptr, nullptr, 0};
  EXPECT_EQ(validate(f.cache(), t), "kv_indptr");
}

// ---- append_paged_kv ----

// Fixture table: kv_len = {21, 0, 48}; two new tokens of request 0 (positions 19, 20).
struct Append {
  PagedFixture f;
  std::vector<int32_t> batch{0, 0}, pos{19, 20};
  TensorView k = TensorView(fake_ptr(10), DType::kBFloat16, {2, 2, 128});
  TensorView v = TensorView(fake_ptr(11), DType::kBFloat16, {2, 2, 128});
  IndexArray bi{fake_idx(10), batch.data(), 2};
  IndexArray ps{fake_idx(11), pos.data(), 2};
  PagedKVCache cache = f.cache();
  PageTable table = f.table();
  // Through the public entry: a rejected call throws before anything could be launched (no GPU).
  std::string run() const {
    return thrown_argument([&] { weft::append_paged_kv(k, v, bi, ps, cache, table, nullptr); });
  }
  // The same checks without the launch (a valid call would launch: a GPU is needed for that).
  std::string validate() const {
    return thrown_argument([&] { weft::paged::validate_append(k, v, bi, ps, cache, table); });
  }
};

TEST(AppendHardening, EveryPointerIsCheckedAgainstItsAccessWidth) {
  ASSERT_EQ(Append().validate(), kNoThrow) << "the baseline must validate";
  {
    Append a;  // new rows: 16-byte loads
    a.k.data = shifted(a.k.data, 8);
    EXPECT_EQ(a.run(), "new_k");
  }
  {
    Append a;
    a.v.data = shifted(a.v.data, 4);
    EXPECT_EQ(a.run(), "new_v");
  }
  {
    Append a;  // token stride of 260 elements: token 1 at +8 bytes from a 16-byte boundary
    a.k = TensorView(fake_ptr(10), DType::kBFloat16, {2, 2, 128}, {260, 128, 1});
    EXPECT_EQ(a.run(), "new_k");
  }
  {
    Append a;  // int32 loads
    a.bi.device = shifted(a.bi.device, 2);
    EXPECT_EQ(a.run(), "batch_indices");
  }
  {
    Append a;
    a.ps.device = shifted(a.ps.device, 2);
    EXPECT_EQ(a.run(), "positions");
  }
  {
    Append a;  // pools: 16-byte stores
    a.cache.k_pages.data = shifted(a.cache.k_pages.data, 8);
    EXPECT_EQ(a.run(), "k_pages");
  }
  {
    Append a;
    a.cache.v_pages.strides[1] += 4;
    EXPECT_EQ(a.run(), "v_pages");
  }
  {
    Append a;
    a.table.indptr.device = shifted(a.table.indptr.device, 2);
    EXPECT_EQ(a.run(), "kv_indptr");
  }
  {
    Append a;
    a.table.indices.device = shifted(a.table.indices.device, 2);
    EXPECT_EQ(a.run(), "kv_indices");
  }
}

// nnz 0 on an empty batch: every array null, new_k / new_v without storage. Accepted, nothing
// launched (this runs without a GPU); a misaligned pointer of an empty array is still refused.
TEST(AppendHardening, EmptyStepWithNullArraysIsANoOp) {
  PagedFixture f;
  const TensorView none(nullptr, DType::kBFloat16, {0, 2, 128});
  EXPECT_EQ(thrown_argument([&] { weft::append_paged_kv(none, none, IndexArray{}, IndexArray{}, f.cache(), PageTable{}, nullptr); }),
            kNoThrow);
  EXPECT_EQ(weft::paged::validate_append(none, none, IndexArray{}, IndexArray{}, f.cache(), PageTable{}), 0);
  const IndexArray bad{shifted(fake_idx(3), 2), nullptr, 0};
  EXPECT_EQ(thrown_argument([&] { weft::append_paged_kv(none, none, bad, IndexArray{}, f.cache(), PageTable{}, nullptr); }),
            "batch_indices");
  const TensorView bad_k(shifted(fake_ptr(10), 8), DType::kBFloat16, {0, 2, 128});
  EXPECT_EQ(thrown_argument([&] { weft::append_paged_kv(bad_k, none, IndexArray{}, IndexArray{}, f.cache(), PageTable{}, nullptr); }),
            "new_k");
}

}  // namespace
