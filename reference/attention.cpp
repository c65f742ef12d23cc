// float64 attention reference and its low-precision emulation. One row routine, templated on the
// accumulation type (double: exact reference; float: the kernels' fp32 arithmetic), serves both.
#include "reference/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/merge.h"
#include "reference/round.h"

namespace weft::ref {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("weft::ref: " + what); }

void check_indptr(const std::vector<int32_t>& p, const char* name) {
  if (p.empty() || p[0] != 0) fail(std::string(name) + " must be non-empty and start at 0");
  for (std::size_t i = 1; i < p.size(); ++i) {
    if (p[i] < p[i - 1]) fail(std::string(name) + " must be non-decreasing");
  }
}

struct Dims {
  int64_t batch, hq, hkv, d, group;
  double scale;
};

Dims check_inputs(const RaggedQ& q, const RaggedKV& kv, const Options& opt) {
  check_indptr(q.qo_indptr, "qo_indptr");
  check_indptr(kv.kv_indptr, "kv_indptr");
  if (q.qo_indptr.size() != kv.kv_indptr.size()) fail("qo_indptr and kv_indptr batch sizes differ");
  if (q.head_dim <= 0 || q.head_dim != kv.head_dim) fail("head_dim of q and kv must match and be > 0");
  if (q.num_qo_heads <= 0 || kv.num_kv_heads <= 0 || q.num_qo_heads % kv.num_kv_heads != 0) {
    fail("num_qo_heads must be a positive multiple of num_kv_heads");
  }
  const int64_t batch = static_cast<int64_t>(q.qo_indptr.size()) - 1;
  if (q.qo_indptr[batch] > 0 && q.data == nullptr) fail("q.data is null");
  if (kv.kv_indptr[batch] > 0 && (kv.k == nullptr || kv.v == nullptr)) fail("kv.k / kv.v is null");
  if (!opt.alibi_slopes.empty() && static_cast<int64_t>(opt.alibi_slopes.size()) != q.num_qo_heads) {
    fail("alibi_slopes must be empty or have num_qo_heads entries");
  }
  if (opt.custom_mask != nullptr) {
    if (static_cast<int64_t>(opt.mask_indptr.size()) != batch + 1) fail("mask_indptr must have batch + 1 entries");
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t ql = q.qo_indptr[b + 1] - q.qo_indptr[b];
      const int64_t kl = kv.kv_indptr[b + 1] - kv.kv_indptr[b];
      if (opt.mask_indptr[b + 1] - opt.mask_indptr[b] < (ql * kl + 7) / 8) {
        fail("mask segment of request " + std::to_string(b) + " shorter than ceil(q_len*kv_len/8) bytes");
      }
    }
  }
  const double scale = opt.sm_scale != 0 ? opt.sm_scale : 1.0 / std::sqrt(static_cast<double>(q.head_dim));
  return {batch, q.num_qo_heads, kv.num_kv_heads, q.head_dim, q.num_qo_heads / kv.num_kv_heads, scale};
}

// Whether key j is visible to query i (absolute position p) of request b.
bool visible(const Options& opt, int64_t b, int64_t i, int64_t j, int64_t p, int64_t kv_len) {
  if (opt.causal && j > p) return false;
  if (opt.window_left >= 0 && j < p - opt.window_left) return false;
  if (opt.custom_mask != nullptr) {
    const int64_t k = i * kv_len + j;
    const uint8_t byte = opt.custom_mask[opt.mask_indptr[b] + (k >> 3)];
    if (((byte >> (k & 7)) & 1) == 0) return false;
  }
  return true;
}

// Precision policy of one computation.
struct Policy {
  bool low = false;          // float32 arithmetic (else double)
  Rounding p_round = Rounding::kNone;
  Rounding o_round = Rounding::kNone;
};

// One (query row, head) over keys [kb, ke) of request b. T: double (exact) or float (emulation).
template <class T>
void row(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const Dims& dm, const Policy& pol,
         int64_t b, int64_t i, int64_t h, int64_t kb, int64_t ke, double* o_out, double* lse_out) {
  const int64_t q0 = q.qo_indptr[b], q_len = q.qo_indptr[b + 1] - q0;
  const int64_t k0 = kv.kv_indptr[b], kv_len = kv.kv_indptr[b + 1] - k0;
  const int64_t p = kv_len - q_len + i;
  const int64_t hk = h / dm.group, D = dm.d;
  const float* qrow = q.data + ((q0 + i) * dm.hq + h) * D;
  const T scale = static_cast<T>(dm.scale);
  const T cap = static_cast<T>(opt.logits_soft_cap);
  const T slope = opt.alibi_slopes.empty() ? T(0) : static_cast<T>(opt.alibi_slopes[h]);

  std::vector<T> s;
  std::vector<int64_t> keys;
  s.reserve(ke - kb);
  keys.reserve(ke - kb);
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = kb; j < ke; ++j) {
    if (!visible(opt, b, i, j, p, kv_len)) continue;
    const float* krow = kv.k + ((k0 + j) * dm.hkv + hk) * D;
    T dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += static_cast<T>(qrow[d]) * static_cast<T>(krow[d]);
    T x = scale * dot;
    if (opt.logits_soft_cap > 0) x = cap * std::tanh(x / cap);
    if (!opt.alibi_slopes.empty()) x += slope * static_cast<T>(j - p);
    s.push_back(x);
    keys.push_back(j);
    if (x > m) m = x;
  }
  double* o = o_out;
  for (int64_t d = 0; d < D; ++d) o[d] = 0;
  if (keys.empty()) {
    *lse_out = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<T> acc(D, T(0));
  T l = 0;
  for (std::size_t n = 0; n < keys.size(); ++n) {
    const T w = std::exp(s[n] - m);
    l += w;  // the row sum uses the unrounded probability (as the kernels do)
    const T wp = static_cast<T>(round_value(pol.p_round, w));
    const float* vrow = kv.v + ((k0 + keys[n]) * dm.hkv + hk) * D;
    for (int64_t d = 0; d < D; ++d) acc[d] += wp * static_cast<T>(vrow[d]);
  }
  for (int64_t d = 0; d < D; ++d) o[d] = round_value(pol.o_round, static_cast<double>(acc[d] / l));
  *lse_out = static_cast<double>(m + std::log(l));
}

void run_request(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const Dims& dm, const Policy& pol,
                 int64_t b, int64_t kb, int64_t ke, double* o_base, double* lse_base) {
  const int64_t q_len = q.qo_indptr[b + 1] - q.qo_indptr[b];
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t h = 0; h < dm.hq; ++h) {
      double* o = o_base + (i * dm.hq + h) * dm.d;
      double* lse = lse_base + i * dm.hq + h;
      if (pol.low) {
        row<float>(q, kv, opt, dm, pol, b, i, h, kb, ke, o, lse);
      } else {
        row<double>(q, kv, opt, dm, pol, b, i, h, kb, ke, o, lse);
      }
    }
  }
}

Result run(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const Policy& pol) {
  const Dims dm = check_inputs(q, kv, opt);
  const int64_t total_q = q.qo_indptr[dm.batch];
  Result r;
  r.o.assign(total_q * dm.hq * dm.d, 0.0);
  r.lse.assign(total_q * dm.hq, 0.0);
  for (int64_t b = 0; b < dm.batch; ++b) {
    const int64_t q0 = q.qo_indptr[b];
    const int64_t kv_len = kv.kv_indptr[b + 1] - kv.kv_indptr[b];
    run_request(q, kv, opt, dm, pol, b, 0, kv_len, r.o.data() + q0 * dm.hq * dm.d, r.lse.data() + q0 * dm.hq);
  }
  return r;
}

Policy low_policy(DType dtype, bool round_p) {
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16 && dtype != DType::kFloat32) {
    fail("attention_low_precision: dtype must be f16, bf16 or f32");
  }
  const Rounding r = rounding_of(dtype);
  return Policy{true, round_p ? r : Rounding::kNone, r};
}

}  // namespace

int64_t paged_kv_len(const PagedKV& kv, int64_t b) {
  const int64_t pages = kv.indptr[b + 1] - kv.indptr[b];
  return pages == 0 ? 0 : (pages - 1) * kv.page_size + kv.last_page_len[b];
}

OwnedKV gather_paged(const PagedKV& kv) {
  check_indptr(kv.indptr, "paged indptr");
  const int64_t batch = static_cast<int64_t>(kv.indptr.size()) - 1;
  if (static_cast<int64_t>(kv.last_page_len.size()) != batch) fail("last_page_len must have batch entries");
  if (static_cast<int64_t>(kv.indices.size()) < kv.indptr[batch]) fail("indices shorter than indptr[batch]");
  if (kv.page_size <= 0 || kv.num_kv_heads <= 0 || kv.head_dim <= 0) fail("page_size, num_kv_heads, head_dim must be > 0");
  const int64_t H = kv.num_kv_heads, D = kv.head_dim, ps = kv.page_size;
  const int64_t stride = kv.page_stride != 0 ? kv.page_stride : ps * H * D;
  OwnedKV out;
  out.num_kv_heads = H;
  out.head_dim = D;
  out.kv_indptr.assign(1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = kv.indptr[b + 1] - kv.indptr[b];
    const int64_t last = kv.last_page_len[b];
    if (pages == 0 ? last != 0 : (last < 1 || last > ps)) {
      fail("last_page_len[" + std::to_string(b) + "] = " + std::to_string(last) + " out of range");
    }
    for (int64_t n = kv.indptr[b]; n < kv.indptr[b + 1]; ++n) {
      if (kv.indices[n] < 0 || kv.indices[n] >= kv.num_pages) fail("page index out of [0, num_pages)");
    }
    const int64_t len = paged_kv_len(kv, b);
    for (int64_t t = 0; t < len; ++t) {
      const int64_t page = kv.indices[kv.indptr[b] + t / ps], slot = t % ps;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = page * stride + (kv.hnd ? (h * ps + slot) : (slot * H + h)) * D;
        out.k.insert(out.k.end(), kv.k_pages + off, kv.k_pages + off + D);
        out.v.insert(out.v.end(), kv.v_pages + off, kv.v_pages + off + D);
      }
    }
    out.kv_indptr.push_back(static_cast<int32_t>(out.kv_indptr.back() + len));
  }
  return out;
}

Options options_from(const AttentionVariant& variant) {
  Options o;
  o.sm_scale = variant.sm_scale;
  o.causal = variant.mask == MaskMode::kCausal;
  o.window_left = variant.window_left;
  o.logits_soft_cap = variant.logits_soft_cap;
  return o;
}

Result attention(const RaggedQ& q, const RaggedKV& kv, const Options& opt) { return run(q, kv, opt, Policy{}); }

Result attention(const RaggedQ& q, const PagedKV& kv, const Options& opt) {
  const OwnedKV g = gather_paged(kv);
  return attention(q, g.view(), opt);
}

Result attention_low_precision(const RaggedQ& q, const RaggedKV& kv, const Options& opt, DType dtype, bool round_p) {
  return run(q, kv, opt, low_policy(dtype, round_p));
}

Result attention_low_precision(const RaggedQ& q, const PagedKV& kv, const Options& opt, DType dtype, bool round_p) {
  const OwnedKV g = gather_paged(kv);
  return attention_low_precision(q, g.view(), opt, dtype, round_p);
}

Result attention_kv_range(const RaggedQ& q, const RaggedKV& kv, const Options& opt, int64_t request,
                          int64_t kv_begin, int64_t kv_end) {
  const Dims dm = check_inputs(q, kv, opt);
  if (request < 0 || request >= dm.batch) fail("attention_kv_range: request out of range");
  const int64_t kv_len = kv.kv_indptr[request + 1] - kv.kv_indptr[request];
  if (kv_begin < 0 || kv_begin > kv_end || kv_end > kv_len) fail("attention_kv_range: bad [kv_begin, kv_end)");
  const int64_t q_len = q.qo_indptr[request + 1] - q.qo_indptr[request];
  Result r;
  r.o.assign(q_len * dm.hq * dm.d, 0.0);
  r.lse.assign(q_len * dm.hq, 0.0);
  run_request(q, kv, opt, dm, Policy{}, request, kv_begin, kv_end, r.o.data(), r.lse.data());
  return r;
}

std::vector<int32_t> iota_indptr(int64_t n, int32_t step) {
  std::vector<int32_t> v(n + 1);
  for (int64_t i = 0; i <= n; ++i) v[i] = static_cast<int32_t>(i * step);
  return v;
}

PackedMask pack_custom_mask_lens(const std::vector<int64_t>& q_lens, const std::vector<int64_t>& kv_lens,
                                 const std::function<bool(int64_t, int64_t, int64_t)>& attend) {
  if (q_lens.size() != kv_lens.size()) fail("pack_custom_mask: q_lens and kv_lens sizes differ");
  PackedMask pm;
  pm.indptr.assign(1, 0);
  for (std::size_t b = 0; b < q_lens.size(); ++b) {
    const int64_t ql = q_lens[b], kl = kv_lens[b];
    const int64_t base = pm.indptr.back();
    pm.bits.resize(base + (ql * kl + 7) / 8, 0);
    for (int64_t i = 0; i < ql; ++i) {
      for (int64_t j = 0; j < kl; ++j) {
        const int64_t k = i * kl + j;
        if (attend(static_cast<int64_t>(b), i, j)) pm.bits[base + (k >> 3)] |= static_cast<uint8_t>(1u << (k & 7));
      }
    }
    pm.indptr.push_back(static_cast<int64_t>(pm.bits.size()));
  }
  return pm;
}

PackedMask pack_custom_mask(const std::vector<int32_t>& qo_indptr, const std::vector<int32_t>& kv_indptr,
                            const std::function<bool(int64_t, int64_t, int64_t)>& attend) {
  if (qo_indptr.size() != kv_indptr.size() || qo_indptr.empty()) fail("pack_custom_mask: indptr sizes differ");
  std::vector<int64_t> ql, kl;
  for (std::size_t b = 0; b + 1 < qo_indptr.size(); ++b) {
    ql.push_back(qo_indptr[b + 1] - qo_indptr[b]);
    kl.push_back(kv_indptr[b + 1] - kv_indptr[b]);
  }
  return pack_custom_mask_lens(ql, kl, attend);
}

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace weft::ref
