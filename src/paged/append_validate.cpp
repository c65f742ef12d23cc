// Host-side validation of append_paged_kv (see append_validate.h).
#include "paged/append_validate.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/fp8.h"
#include "weft/validate.h"

namespace weft::paged {
namespace {

void check_new(const TensorView& t, const char* name, const PagedKVCache& cache) {
  check::on_device(t, name);
  check::ndim_is(t, name, 3);
  // 16-bit pools: the same dtype (a copy); fp8 pools: f16 or bf16 input, quantized.
  if (is_fp8(cache.k_pages.dtype))
    check::dtype_in(t, name, {DType::kFloat16, DType::kBFloat16});
  else
    check::same_dtype(cache.k_pages, "k_pages", t, name);
  check::shape_is(t, name, {-1, cache.num_kv_heads(), cache.head_dim()});
  WEFT_CHECK_ARG(t.device_id == cache.k_pages.device_id, name,
                 "on device " << t.device_id << ", the pools on " << cache.k_pages.device_id);
  check::inner_contiguous(t, name, 16);
}

// nnz entries; host mirror present when nnz > 0; device copy present when nnz > 0 and, since the
// kernel loads it as int32, 4-byte aligned whenever given (an empty step may pass null for both).
void check_token_array(const IndexArray& a, int64_t nnz, const char* name) {
  WEFT_CHECK_ARG(a.size == nnz, name, "expected one entry per new token (" << nnz << "), got size " << a.size);
  WEFT_CHECK_ARG(nnz == 0 || a.host != nullptr, name, "host mirror is null (" << nnz << " entries expected)");
  check::device_index_array(a.device, nnz, name);
}

// Detects two tokens writing the same (page, slot). Small appends (decode steps) sort their
// keys; large ones use one bit per slot of the pool, kept per host thread and cleaned after
// each call, so a call costs O(nnz) after the first. Pools too large for a 32 MiB bitmap sort.
class SlotSet {
 public:
  SlotSet(int64_t slots, int64_t nnz) : use_bits_(nnz > kSortMax && slots <= kBitmapMaxSlots) {
    if (use_bits_) {
      const std::size_t words = static_cast<std::size_t>((slots + 63) / 64);
      if (bits().size() < words) bits().resize(words, 0);
      touched().clear();
      touched().reserve(static_cast<std::size_t>(nnz));
    } else {
      keys_.reserve(static_cast<std::size_t>(nnz));
    }
  }
  ~SlotSet() {
    if (use_bits_)
      for (int64_t s : touched()) bits()[s >> 6] = 0;  // whole words: only touched ones are non-zero
  }
  void insert(int64_t slot, int64_t token) {
    if (!use_bits_) {
      keys_.emplace_back(slot, token);
      return;
    }
    uint64_t& w = bits()[slot >> 6];
    const uint64_t m = uint64_t{1} << (slot & 63);
    if ((w & m) && duplicate_ < 0) duplicate_ = token;
    if (w == 0) touched().push_back(slot);
    w |= m;
  }
  // First token (by index) whose slot an earlier token already took; -1 when none.
  int64_t duplicate() {
    if (use_bits_) return duplicate_;
    std::sort(keys_.begin(), keys_.end());
    int64_t dup = -1;
    for (std::size_t i = 1; i < keys_.size(); ++i)
      if (keys_[i].first == keys_[i - 1].first && (dup < 0 || keys_[i].second < dup)) dup = keys_[i].second;
    return dup;
  }

 private:
  static constexpr int64_t kSortMax = 4096;                     // tokens: sorting is cheaper
  static constexpr int64_t kBitmapMaxSlots = int64_t{1} << 28;  // 32 MiB of bits
  static std::vector<uint64_t>& bits() {
    thread_local std::vector<uint64_t> b;
    return b;
  }
  static std::vector<int64_t>& touched() {  // one slot per word made non-zero by this call
    thread_local std::vector<int64_t> t;
    return t;
  }
  bool use_bits_;
  int64_t duplicate_ = -1;
  std::vector<std::pair<int64_t, int64_t>> keys_;  // (slot, token), sort mode
};

}  // namespace

int64_t validate_append(const TensorView& new_k, const TensorView& new_v,
                        const IndexArray& batch_indices, const IndexArray& positions,
                        const PagedKVCache& cache, const PageTable& table) {
  validate_paged_kv(cache, table);
  check_new(new_k, "new_k", cache);
  check_new(new_v, "new_v", cache);
  check::same_shape(new_k, "new_k", new_v, "new_v");
  check::same_dtype(new_k, "new_k", new_v, "new_v");
  const int64_t nnz = new_k.size(0);
  check_token_array(batch_indices, nnz, "batch_indices");
  check_token_array(positions, nnz, "positions");
  if (nnz == 0) return 0;

  const int64_t page_size = cache.page_size();
  const int32_t* bi = batch_indices.host;
  const int32_t* pos = positions.host;
  SlotSet seen(cache.num_pages() * page_size, nnz);
  const int32_t* indptr = table.indptr.host;
  const int32_t* last = table.last_page_len.host;
  const int32_t* indices = table.indices.host;
  const uint32_t ps = static_cast<uint32_t>(page_size);  // validated: [1, INT32_MAX]
  // Tokens usually come in runs (b, p), (b, p + 1), ...: the page index and slot then advance
  // without a division.
  int32_t prev_b = -1, prev_pos = -2;
  uint32_t page_idx = 0, slot = 0;
  for (int64_t i = 0; i < nnz; ++i) {
    const int32_t b = bi[i];
    const int32_t p = pos[i];
    if (b != prev_b || p != prev_pos + 1 || p < 0) {
      WEFT_CHECK_ARG(b >= 0 && b < table.batch_size, "batch_indices",
                     "batch_indices[" << i << "] = " << b << " is outside [0, " << table.batch_size << ")");
      WEFT_CHECK_ARG(p >= 0, "positions", "positions[" << i << "] = " << p << " must be >= 0");
      page_idx = static_cast<uint32_t>(p) / ps;
      slot = static_cast<uint32_t>(p) - page_idx * ps;
    } else if (++slot == ps) {
      slot = 0;
      ++page_idx;
    }
    const int64_t pages = static_cast<int64_t>(indptr[b + 1]) - indptr[b];
    // p < kv_len(b) == (pages - 1) * page_size + last[b]  <=>  this page exists and, in the
    // last page, slot < last[b].
    WEFT_CHECK_ARG(page_idx < pages && (page_idx + 1 < pages || slot < static_cast<uint32_t>(last[b])), "positions",
                   "positions[" << i << "] = " << p << " is outside [0, " << kv_len_of(table, page_size, b)
                                << ") = [0, kv_len(" << b << ")); the page table must already include the new tokens");
    seen.insert(static_cast<int64_t>(indices[indptr[b] + page_idx]) * page_size + slot, i);
    prev_b = b;
    prev_pos = p;
  }
  const int64_t dup = seen.duplicate();
  if (dup >= 0) {
    const int32_t b = bi[dup];
    const int64_t page = table.indices.host[table.indptr.host[b] + pos[dup] / page_size];
    throw Error("positions", "token " + std::to_string(dup) + " (request " + std::to_string(b) + ", position " +
                                 std::to_string(pos[dup]) + ") targets page " + std::to_string(page) + " slot " +
                                 std::to_string(pos[dup] % page_size) +
                                 ", which another token of this call also writes");
  }
  return nnz;
}

}  // namespace weft::paged
