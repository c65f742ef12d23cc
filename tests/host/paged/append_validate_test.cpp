// append_paged_kv validation (host only): every rejected call throws before any launch and
// names the argument. Device pointers are fake: validation must never dereference them.
#include <gtest/gtest.h>

#include <vector>

#include "paged/append_validate.h"
#include "paged_fixture.h"

namespace {

using weft::DType;
using weft::IndexArray;
using weft::TensorView;
using weft::test::fake_idx;
using weft::test::fake_ptr;
using weft::test::PagedFixture;
using weft::test::thrown_argument;

// Fixture table: kv_len = {21, 0, 48}. New tokens: request 0 positions 19..20 (mid-page),
// request 2 positions 40..47 (its last page).
struct AppendCase {
  PagedFixture f;
  std::vector<int32_t> batch{0, 0, 2, 2, 2, 2, 2, 2, 2, 2};
  std::vector<int32_t> pos{19, 20, 40, 41, 42, 43, 44, 45, 46, 47};
  DType k_dtype = DType::kBFloat16, v_dtype = DType::kBFloat16;

  int64_t nnz() const { return static_cast<int64_t>(batch.size()); }
  TensorView new_k() const { return TensorView(fake_ptr(10), k_dtype, {nnz(), f.heads, f.head_dim}); }
  TensorView new_v() const { return TensorView(fake_ptr(11), v_dtype, {nnz(), f.heads, f.head_dim}); }
  IndexArray bi() const { return {fake_idx(10), batch.data(), static_cast<int64_t>(batch.size())}; }
  IndexArray ps() const { return {fake_idx(11), pos.data(), static_cast<int64_t>(pos.size())}; }

  std::string validate(const TensorView& k, const TensorView& v, const IndexArray& b, const IndexArray& p) const {
    return thrown_argument([&] { weft::paged::validate_append(k, v, b, p, f.cache(), f.table()); });
  }
  std::string validate() const { return validate(new_k(), new_v(), bi(), ps()); }
  // The public entry: must throw the same, before it gets anywhere near a launch.
  std::string append() const {
    return thrown_argument([&] { weft::append_paged_kv(new_k(), new_v(), bi(), ps(), f.cache(), f.table(), nullptr); });
  }
};

TEST(AppendValidate, AcceptsValidAppend) {
  for (weft::KVLayout layout : {weft::KVLayout::kNHD, weft::KVLayout::kHND}) {
    AppendCase c;
    c.f.layout = layout;
    EXPECT_EQ(c.validate(), "<no throw>");
    EXPECT_EQ(weft::paged::validate_append(c.new_k(), c.new_v(), c.bi(), c.ps(), c.f.cache(), c.f.table()), 10);
  }
}

TEST(AppendValidate, ZeroTokensIsANoOp) {
  AppendCase c;
  c.batch.clear();
  c.pos.clear();
  IndexArray empty{};
  const TensorView k(nullptr, DType::kBFloat16, {0, 2, 128});
  EXPECT_EQ(c.validate(k, k, empty, empty), "<no throw>");
  // Public entry with nothing to do returns without launching (works without a GPU).
  EXPECT_NO_THROW(weft::append_paged_kv(k, k, empty, empty, c.f.cache(), c.f.table(), nullptr));
}

TEST(AppendValidate, DtypeMismatch) {
  AppendCase c;
  c.k_dtype = DType::kFloat16;  // pools are bf16
  EXPECT_EQ(c.validate(), "new_k");
  EXPECT_EQ(c.append(), "new_k");
  AppendCase d;
  d.v_dtype = DType::kFloat16;
  EXPECT_EQ(d.validate(), "new_v");
  AppendCase e;
  e.k_dtype = e.v_dtype = DType::kFloat32;
  EXPECT_EQ(e.validate(), "new_k");
}

TEST(AppendValidate, ShapeMismatch) {
  AppendCase c;
  const TensorView heads(fake_ptr(10), DType::kBFloat16, {10, 4, 128});
  const TensorView dim(fake_ptr(10), DType::kBFloat16, {10, 2, 64});
  const TensorView rank(fake_ptr(10), DType::kBFloat16, {10, 256});
  const TensorView fewer(fake_ptr(11), DType::kBFloat16, {9, 2, 128});
  EXPECT_EQ(c.validate(heads, c.new_v(), c.bi(), c.ps()), "new_k");
  EXPECT_EQ(c.validate(dim, c.new_v(), c.bi(), c.ps()), "new_k");
  EXPECT_EQ(c.validate(rank, c.new_v(), c.bi(), c.ps()), "new_k");
  EXPECT_EQ(c.validate(c.new_k(), heads, c.bi(), c.ps()), "new_v");
  EXPECT_EQ(c.validate(c.new_k(), fewer, c.bi(), c.ps()), "new_v");
}

TEST(AppendValidate, MisalignedOrStridedNewKV) {
  AppendCase c;
  TensorView k = c.new_k();
  k.data = static_cast<char*>(k.data) + 2;
  EXPECT_EQ(c.validate(k, c.new_v(), c.bi(), c.ps()), "new_k");
  TensorView v = c.new_v();
  v.strides = {2 * 128 * 2, 128 * 2, 2};  // inner stride 2
  EXPECT_EQ(c.validate(c.new_k(), v, c.bi(), c.ps()), "new_v");
  v = c.new_v();
  v.strides = {2 * 136 + 4, 136, 1};  // token stride 276 elements = 552 bytes: rows misaligned
  EXPECT_EQ(c.validate(c.new_k(), v, c.bi(), c.ps()), "new_v");
  // A strided but aligned view (e.g. K inside a fused QKV buffer) is fine.
  v.strides = {12 * 128, 128, 1};
  EXPECT_EQ(c.validate(c.new_k(), v, c.bi(), c.ps()), "<no throw>");
}

TEST(AppendValidate, NewKVOnHostOrNull) {
  AppendCase c;
  TensorView k = c.new_k();
  k.device = weft::Device::kCPU;
  EXPECT_EQ(c.validate(k, c.new_v(), c.bi(), c.ps()), "new_k");
  TensorView v = c.new_v();
  v.data = nullptr;
  EXPECT_EQ(c.validate(c.new_k(), v, c.bi(), c.ps()), "new_v");
  v = c.new_v();
  v.device_id = 1;
  EXPECT_EQ(c.validate(c.new_k(), v, c.bi(), c.ps()), "new_v");
}

TEST(AppendValidate, TokenArraySizes) {
  AppendCase c;
  IndexArray b = c.bi();
  b.size = 9;
  EXPECT_EQ(c.validate(c.new_k(), c.new_v(), b, c.ps()), "batch_indices");
  IndexArray p = c.ps();
  p.size = 11;
  EXPECT_EQ(c.validate(c.new_k(), c.new_v(), c.bi(), p), "positions");
}

TEST(AppendValidate, TokenArrayPointers) {
  AppendCase c;
  IndexArray b = c.bi();
  b.host = nullptr;
  EXPECT_EQ(c.validate(c.new_k(), c.new_v(), b, c.ps()), "batch_indices");
  b = c.bi();
  b.device = nullptr;
  EXPECT_EQ(c.validate(c.new_k(), c.new_v(), b, c.ps()), "batch_indices");
  IndexArray p = c.ps();
  p.host = nullptr;
  EXPECT_EQ(c.validate(c.new_k(), c.new_v(), c.bi(), p), "positions");
  p = c.ps();
  p.device = nullptr;
  EXPECT_EQ(c.validate(c.new_k(), c.new_v(), c.bi(), p), "positions");
}

TEST(AppendValidate, BatchIndexOutOfRange) {
  AppendCase c;
  c.batch[3] = 3;  // batch = 3
  EXPECT_EQ(c.validate(), "batch_indices");
  EXPECT_EQ(c.append(), "batch_indices");
  c.batch[3] = -1;
  EXPECT_EQ(c.validate(), "batch_indices");
}

TEST(AppendValidate, PositionOutOfRange) {
  AppendCase c;
  c.pos[1] = 21;  // kv_len(0) = 21
  EXPECT_EQ(c.validate(), "positions");
  EXPECT_EQ(c.append(), "positions");
  c.pos[1] = -1;
  EXPECT_EQ(c.validate(), "positions");
  AppendCase d;
  d.batch[0] = 1;  // request 1 has kv_len 0: nothing can be appended to it
  d.pos[0] = 0;
  EXPECT_EQ(d.validate(), "positions");
}

TEST(AppendValidate, DuplicateTargetSlot) {
  AppendCase c;
  c.pos[1] = 19;  // two tokens for request 0, position 19
  EXPECT_EQ(c.validate(), "positions");
  // Two requests sharing a page: both appending into the same slot of it is a race.
  AppendCase d;
  d.f.indices = {3, 1, 0, 7, 1};  // request 2's last page is request 0's page 1
  d.batch = {0, 2};
  d.pos = {20, 36};  // both slot 4 of page 1
  EXPECT_EQ(d.validate(), "positions");
  d.pos = {20, 37};  // different slots of the shared page: fine
  EXPECT_EQ(d.validate(), "<no throw>");
  // The slot set is reused across calls: a rejected call must not leave stale bits behind.
  AppendCase e;
  EXPECT_EQ(e.validate(), "<no throw>");
  EXPECT_EQ(e.validate(), "<no throw>");
}

TEST(AppendValidate, TableErrorsSurfaceThroughAppend) {
  AppendCase c;
  c.f.indices[4] = 8;
  EXPECT_EQ(c.append(), "kv_indices");
  AppendCase d;
  d.f.indptr = {0, 2, 1, 5};
  EXPECT_EQ(d.append(), "kv_indptr");
  AppendCase e;
  e.f.head_dim = 96;
  EXPECT_EQ(e.append(), "head_dim");
}

}  // namespace

namespace {

// > 4096 tokens: the per-thread slot bitmap path (small appends sort instead).
TEST(AppendValidate, DuplicateTargetSlotLargeAppend) {
  AppendCase c;
  const int32_t n = 5000;
  c.f.num_pages = 400;
  c.f.indptr = {0, (n + 15) / 16};
  c.f.indices.clear();
  for (int32_t i = 0; i < (n + 15) / 16; ++i) c.f.indices.push_back(399 - i);
  c.f.last = {n - ((n + 15) / 16 - 1) * 16};
  c.batch.assign(n, 0);
  c.pos.resize(n);
  for (int32_t i = 0; i < n; ++i) c.pos[i] = (i * 7919) % n;  // a permutation of 0..n-1
  EXPECT_EQ(c.validate(), "<no throw>");
  const int32_t saved = c.pos[n - 1];
  c.pos[n - 1] = c.pos[10];
  EXPECT_EQ(c.validate(), "positions");
  c.pos[n - 1] = saved;
  c.pos[20] = n;  // out of range mid-way: bits set so far must be cleared on the throw
  EXPECT_EQ(c.validate(), "positions");
  c.pos[20] = (20 * 7919) % n;
  EXPECT_EQ(c.validate(), "<no throw>");
  EXPECT_EQ(c.validate(), "<no throw>");
}

}  // namespace
