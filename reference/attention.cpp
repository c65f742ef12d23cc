// float64 attention reference and its low-precision emulation: input checks, paged gathering,
// masks. The rows themselves are computed by detail::run_jobs (attention_blocks.cpp), one engine
// templated on the accumulation type (double: exact reference; float: the kernels' fp32 arithmetic).
#include "reference/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/attention_detail.h"
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

using detail::Dims;
using detail::Policy;
using detail::RequestJob;

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

Result run(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const Policy& pol) {
  const Dims dm = check_inputs(q, kv, opt);
  const int64_t total_q = q.qo_indptr[dm.batch];
  Result r;
  r.o.assign(total_q * dm.hq * dm.d, 0.0);
  r.lse.assign(total_q * dm.hq, 0.0);
  std::vector<RequestJob> jobs;
  for (int64_t b = 0; b < dm.batch; ++b) {
    const int64_t q0 = q.qo_indptr[b];
    const int64_t kv_len = kv.kv_indptr[b + 1] - kv.kv_indptr[b];
    jobs.push_back({b, 0, kv_len, r.o.data() + q0 * dm.hq * dm.d, r.lse.data() + q0 * dm.hq});
  }
  detail::run_jobs(q, kv, opt, dm, pol, jobs.data(), static_cast<int64_t>(jobs.size()));
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
  const RequestJob job{request, kv_begin, kv_end, r.o.data(), r.lse.data()};
  detail::run_jobs(q, kv, opt, dm, Policy{}, &job, 1);
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
