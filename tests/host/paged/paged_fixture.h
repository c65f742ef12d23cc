// Host-test fixture: a valid paged cache + page table whose device pointers are fake (aligned,
// non-null, never dereferenced: validation reads host mirrors only), plus a thrown-argument probe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weft/error.h"
#include "weft/paged_kv.h"
#include "common/test_util.h"

namespace weft::test {


// Fake device addresses: 4 KiB aligned, far apart, never dereferenced.
inline void* fake_ptr(int i) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + (uintptr_t(i) << 32)); }
inline const int32_t* fake_idx(int i) { return static_cast<const int32_t*>(fake_ptr(100 + i)); }

struct PagedFixture {
  int64_t num_pages = 8, page_size = 16, heads = 2, head_dim = 128;
  DType dtype = DType::kBFloat16;
  KVLayout layout = KVLayout::kNHD;
  // 3 requests: 2 pages (kv_len 16 + 5 = 21), none (0), 3 pages (2*16 + 16 = 48).
  std::vector<int32_t> indptr{0, 2, 2, 5};
  std::vector<int32_t> indices{3, 1, 0, 7, 4};
  std::vector<int32_t> last{5, 0, 16};

  TensorView pool(int i) const {
    if (layout == KVLayout::kNHD)
      return TensorView(fake_ptr(i), dtype, {num_pages, page_size, heads, head_dim});
    return TensorView(fake_ptr(i), dtype, {num_pages, heads, page_size, head_dim});
  }
  PagedKVCache cache() const {
    PagedKVCache c;
    c.k_pages = pool(0);
    c.v_pages = pool(1);
    c.layout = layout;
    return c;
  }
  PageTable table() const {
    PageTable t;
    t.batch_size = static_cast<int32_t>(last.size());
    t.indptr = {fake_idx(0), indptr.data(), static_cast<int64_t>(indptr.size())};
    t.indices = {fake_idx(1), indices.data(), static_cast<int64_t>(indices.size())};
    t.last_page_len = {fake_idx(2), last.data(), static_cast<int64_t>(last.size())};
    return t;
  }
  std::string validate() const {
    return thrown_argument([&] { validate_paged_kv(cache(), table()); });
  }
};

}  // namespace weft::test
