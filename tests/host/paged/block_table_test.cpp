// page_table_from_block_tables: vLLM block tables -> BSR; validation and random round trips.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "paged_fixture.h"

namespace {

using weft::test::PagedFixture;
using weft::test::thrown_argument;

TEST(BlockTable, SmallExample) {
  // page_size 4; lengths 5 (2 blocks, last 1), 0 (none), 8 (2 blocks, last 4), 1.
  const std::vector<int32_t> bt{7, 2, 99, 5, 5, 5, 0, 3, 99, 6, 99, 99};
  const std::vector<int32_t> lens{5, 0, 8, 1};
  const weft::PageTableHost t = weft::page_table_from_block_tables(bt.data(), 4, 3, lens.data(), 4, 8);
  EXPECT_EQ(t.indptr, (std::vector<int32_t>{0, 2, 2, 4, 5}));
  EXPECT_EQ(t.indices, (std::vector<int32_t>{7, 2, 0, 3, 6}));
  EXPECT_EQ(t.last_page_len, (std::vector<int32_t>{1, 0, 4, 1}));
  EXPECT_EQ(t.batch_size(), 4);
}

TEST(BlockTable, EmptyBatch) {
  const weft::PageTableHost t = weft::page_table_from_block_tables(nullptr, 0, 0, nullptr, 16, 0);
  EXPECT_EQ(t.indptr, std::vector<int32_t>{0});
  EXPECT_TRUE(t.indices.empty());
  EXPECT_EQ(t.batch_size(), 0);
}

TEST(BlockTable, ShortRow) {
  const std::vector<int32_t> bt{0, 1, 2, 3};
  const std::vector<int32_t> lens{8, 9};  // page 4, 2 blocks per row: 9 tokens need 3
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 2, 2, lens.data(), 4, 8); }),
            "block_tables");
}

TEST(BlockTable, NegativeSeqLen) {
  const std::vector<int32_t> bt{0, 1, 2, 3};
  const std::vector<int32_t> lens{4, -1};
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 2, 2, lens.data(), 4, 8); }),
            "seq_lens");
}

TEST(BlockTable, BlockIdOutOfRange) {
  const std::vector<int32_t> lens{8, 5};
  std::vector<int32_t> bt{0, 1, 2, 8};
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 2, 2, lens.data(), 4, 8); }),
            "block_tables");
  bt = {0, -1, 2, 3};
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 2, 2, lens.data(), 4, 8); }),
            "block_tables");
  // Entries past a row's used prefix are never read, so garbage there is fine.
  bt = {0, 1, 2, -77};
  const std::vector<int32_t> short_lens{8, 4};
  EXPECT_NO_THROW(weft::page_table_from_block_tables(bt.data(), 2, 2, short_lens.data(), 4, 8));
}

TEST(BlockTable, BadScalarsAndNulls) {
  const std::vector<int32_t> bt{0, 1};
  const std::vector<int32_t> lens{4};
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 1, 2, lens.data(), 0, 8); }),
            "page_size");
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), -1, 2, lens.data(), 4, 8); }),
            "batch");
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 1, -2, lens.data(), 4, 8); }),
            "max_blocks_per_seq");
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 1, 2, nullptr, 4, 8); }),
            "seq_lens");
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(nullptr, 1, 2, lens.data(), 4, 8); }),
            "block_tables");
  EXPECT_EQ(thrown_argument([&] { weft::page_table_from_block_tables(bt.data(), 1, 2, lens.data(), 4, -1); }),
            "num_pages");
}

// Property: on random block tables the BSR output passes validate_paged_kv, gives back every
// sequence length, and token t of request b maps to block_tables[b][t / page_size].
TEST(BlockTable, RandomRoundTrip) {
  auto rng = weft::test::Rng::for_current_test();
  for (int iter = 0; iter < 200; ++iter) {
    const int64_t page_size = rng.randint(1, 33);
    const int64_t batch = rng.randint(0, 9);
    const int64_t max_blocks = rng.randint(0, 7);
    const int64_t num_pages = rng.randint(1, 64);
    std::vector<int32_t> bt(batch * max_blocks), lens(batch);
    for (auto& x : bt) x = static_cast<int32_t>(rng.randint(0, num_pages - 1));
    for (auto& l : lens) l = static_cast<int32_t>(rng.randint(0, max_blocks * page_size));
    const weft::PageTableHost t =
        weft::page_table_from_block_tables(bt.data(), batch, max_blocks, lens.data(), page_size, num_pages);
    ASSERT_EQ(t.batch_size(), batch);
    ASSERT_EQ(static_cast<int64_t>(t.indptr.size()), batch + 1);

    PagedFixture f;
    f.page_size = page_size;
    f.num_pages = num_pages;
    f.indptr = t.indptr;
    f.indices = t.indices;
    f.last = t.last_page_len;
    ASSERT_EQ(f.validate(), "<no throw>") << "iter " << iter;
    const weft::PageTable table = f.table();
    for (int32_t b = 0; b < batch; ++b) {
      ASSERT_EQ(weft::kv_len_of(table, page_size, b), lens[b]) << "iter " << iter << " b " << b;
      for (int64_t tok = 0; tok < lens[b]; ++tok)
        ASSERT_EQ(t.indices[t.indptr[b] + tok / page_size], bt[b * max_blocks + tok / page_size]);
    }
  }
}

}  // namespace

// validate_block_table: the native block table's own checks, each naming its argument.
namespace {

struct NativeTable {
  std::vector<int32_t> ids, lens;
  weft::BlockTable t;
  // Host mirrors double as fake (aligned, non-null) device pointers: validation never reads them.
  NativeTable(std::vector<int32_t> i, std::vector<int32_t> l, int32_t max_blocks, int64_t stride)
      : ids(std::move(i)), lens(std::move(l)) {
    t.batch_size = static_cast<int32_t>(lens.size());
    t.max_blocks = max_blocks;
    t.row_stride = stride;
    t.block_ids = {ids.data(), ids.data(), int64_t(ids.size())};
    t.seq_lens = {lens.data(), lens.data(), int64_t(lens.size())};
  }
};

TEST(NativeBlockTable, AcceptsPaddedRows) {
  // page 4, stride 4, 3 usable blocks; padding (-5, 99) never read.
  NativeTable nt({7, 2, -5, 99, 5, 99, 99, 99, 0, 3, 6, 99}, {5, 0, 12}, 3, 4);
  EXPECT_NO_THROW(weft::validate_block_table(nt.t, 4, 8));
  EXPECT_EQ(weft::kv_len_of(nt.t, 2), 12);
}

TEST(NativeBlockTable, NamesTheBadArgument) {
  {
    NativeTable nt({0, 1, 2, 8}, {8, 5}, 2, 2);  // id 8 of 8 pages
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.block_ids");
  }
  {
    NativeTable nt({0, -1, 2, 3}, {8, 5}, 2, 2);  // negative id in a used entry
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.block_ids");
  }
  {
    NativeTable nt({0, 1, 2, 3}, {8, 9}, 2, 2);  // row 1 needs 3 blocks
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.seq_lens");
  }
  {
    NativeTable nt({0, 1, 2, 3}, {8, -1}, 2, 2);
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.seq_lens");
  }
  {
    NativeTable nt({0, 1, 2, 3}, {8, 4}, 2, 1);  // stride 1 < max_blocks 2
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.row_stride");
  }
  {
    NativeTable nt({0, 1, 2}, {8, 4}, 2, 2);  // needs (2 - 1) * 2 + 2 = 4 entries
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.block_ids");
  }
  {
    NativeTable nt({0, 1, 2, 3}, {8}, 2, 2);
    nt.t.batch_size = 2;  // seq_lens has 1 entry
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.seq_lens");
  }
  {
    NativeTable nt({0, 1, 2, 3}, {8, 4}, 2, 2);
    nt.t.block_ids.device = nullptr;
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.block_ids.device");
  }
  {
    NativeTable nt({0, 1, 2, 3}, {8, 4}, 2, int64_t(1) << 31);  // row offsets past int32
    EXPECT_EQ(thrown_argument([&] { weft::validate_block_table(nt.t, 4, 8); }), "table.row_stride");
  }
}

}  // namespace
