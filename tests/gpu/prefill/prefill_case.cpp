#include "prefill_case.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "reference/attention.h"
#include "weft/fp8.h"

namespace weft::test::prefill {

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

const char* mask_name(MaskMode m) {
  return m == MaskMode::kCausal ? "causal" : m == MaskMode::kCustom ? "custom" : "none";
}

constexpr uint16_t kNaNBits = 0xFFFF;  // NaN in f16 and bf16

}  // namespace

std::string Case::describe() const {
  std::ostringstream os;
  os << "q_lens={";
  for (std::size_t i = 0; i < q_lens.size() && i < 8; ++i) os << (i ? "," : "") << q_lens[i];
  if (q_lens.size() > 8) os << ",...";
  os << "} kv_lens={";
  for (std::size_t i = 0; i < kv_lens.size() && i < 8; ++i) os << (i ? "," : "") << kv_lens[i];
  if (kv_lens.size() > 8) os << ",...";
  os << "} heads=" << num_qo_heads << "/" << num_kv_heads << " d=" << head_dim << " "
     << dtype_name(dtype) << " " << (paged ? "paged" : "ragged");
  if (paged) os << " ps=" << page_size << " " << kv_layout_name(layout);
  os << " mask=" << mask_name(variant.mask) << " window=" << variant.window_left
     << " softcap=" << variant.logits_soft_cap << " cta_q=" << opt.cta_q
     << " split=" << opt.allow_split_kv;
  if (!alibi_slopes.empty()) os << " alibi(" << alibi_slopes.size() << " slopes, h0 " << alibi_slopes[0] << ")";
  if (kv_fp8) os << " kv=" << dtype_name(*kv_fp8) << (fp8_per_head ? " per-head" : " per-tensor") << " scales";
  return os.str();
}

PagedKVCache Prepared::cache() const {
  PagedKVCache kc;
  const int64_t ps = c.page_size, H = c.num_kv_heads, D = c.head_dim;
  const DType kv = c.kv_fp8.value_or(c.dtype);
  if (c.layout == KVLayout::kNHD) {
    kc.k_pages = TensorView(d_pages_k.get(), kv, {num_pages, ps, H, D});
    kc.v_pages = TensorView(d_pages_v.get(), kv, {num_pages, ps, H, D});
  } else {
    kc.k_pages = TensorView(d_pages_k.get(), kv, {num_pages, H, ps, D});
    kc.v_pages = TensorView(d_pages_v.get(), kv, {num_pages, H, ps, D});
  }
  kc.layout = c.layout;
  if (c.kv_fp8) {
    kc.k_scale = KVScale{d_k_scale.as<float>(), k_scale.data(), int64_t(k_scale.size())};
    kc.v_scale = KVScale{d_v_scale.as<float>(), v_scale.data(), int64_t(v_scale.size())};
  }
  return kc;
}

PageTable Prepared::table() const {
  PageTable t;
  t.batch_size = static_cast<int32_t>(c.q_lens.size());
  t.indptr = {d_page_indptr.as<int32_t>(), page_indptr.data(), int64_t(page_indptr.size())};
  t.indices = {d_page_indices.as<int32_t>(), page_indices.data(), int64_t(page_indices.size())};
  t.last_page_len = {d_last.as<int32_t>(), last_page_len.data(), int64_t(last_page_len.size())};
  return t;
}

TensorView Prepared::q_view() const {
  return TensorView(d_q.get(), c.dtype, {total_q, c.num_qo_heads, c.head_dim});
}
TensorView Prepared::out_view() const {
  return TensorView(d_out.get(), c.dtype, {total_q, c.num_qo_heads, c.head_dim});
}
TensorView Prepared::lse_view() const {
  return TensorView(d_lse.get(), DType::kFloat32, {total_q, c.num_qo_heads});
}
CustomMaskDevice Prepared::mask() const {
  return CustomMaskDevice{d_mask.as<uint8_t>(), d_mask_indptr.as<int32_t>()};
}

void prepare(Prepared& p, const Case& c, uint64_t salt) {
  p.c = c;
  Rng rng = Rng::for_current_test(salt);
  const int64_t batch = static_cast<int64_t>(c.q_lens.size());
  p.qo_indptr.assign(batch + 1, 0);
  p.kv_indptr.assign(batch + 1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    p.qo_indptr[b + 1] = p.qo_indptr[b] + c.q_lens[b];
    p.kv_indptr[b + 1] = p.kv_indptr[b] + c.kv_lens[b];
  }
  p.total_q = p.qo_indptr[batch];
  p.total_kv = p.kv_indptr[batch];
  const int64_t D = c.head_dim, Hq = c.num_qo_heads, Hk = c.num_kv_heads;
  // Q spread a bit wider than K so softmax rows are not flat.
  p.q = rng.uniform_vec(std::max<int64_t>(p.total_q * Hq * D, 1), -2.0, 2.0);
  p.k = rng.uniform_vec(std::max<int64_t>(p.total_kv * Hk * D, 1), -1.0, 1.0);
  p.v = rng.uniform_vec(std::max<int64_t>(p.total_kv * Hk * D, 1), -1.0, 1.0);
  round_inplace(c.dtype, p.q);
  round_inplace(c.dtype, p.k);
  round_inplace(c.dtype, p.v);
  // fp8: codes in p.k's layout ([token][head][d]); p.k / p.v become the dequantized values.
  std::vector<uint8_t> k8, v8;
  if (c.kv_fp8) {
    const DType f = *c.kv_fp8;
    p.c.opt.kv_dtype = f;
    auto head_of = [&](size_t i) { return int64_t(i / D) % Hk; };
    for (std::vector<float>* x : {&p.k, &p.v})
      for (size_t i = 0; i < x->size(); ++i) (*x)[i] = round_to(c.dtype, (*x)[i] * float(1 + 3 * (head_of(i) % 4)));
    p.k16 = p.k;
    p.v16 = p.v;
    auto scales = [&](const std::vector<float>& x) {
      std::vector<float> amax(Hk, 0.f);
      for (size_t i = 0; i < x.size(); ++i) amax[head_of(i)] = std::max(amax[head_of(i)], std::fabs(x[i]));
      if (!c.fp8_per_head) amax.assign(1, *std::max_element(amax.begin(), amax.end()));
      for (float& a : amax) a = a > 0 ? a / fp8_max(f) : 1.f;
      return amax;
    };
    p.k_scale = scales(p.k);
    p.v_scale = scales(p.v);
    auto quantize = [&](std::vector<float>& x, const std::vector<float>& sc) {
      std::vector<uint8_t> q(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const float scl = sc[c.fp8_per_head ? head_of(i) : 0];
        q[i] = fp8_from_float(x[i] / scl, f);
        x[i] = scl * fp8_to_float(q[i], f);
      }
      return q;
    };
    k8 = quantize(p.k, p.k_scale);
    v8 = quantize(p.v, p.v_scale);
    p.d_k_scale = DeviceBuffer::from(p.k_scale);
    p.d_v_scale = DeviceBuffer::from(p.v_scale);
  }
  p.d_q = DeviceBuffer::from(to_half_bits(c.dtype, p.q));
  if (!c.alibi_slopes.empty()) {
    p.d_alibi = DeviceBuffer::from(c.alibi_slopes);
    p.c.variant.alibi_slopes = p.d_alibi.as<float>();
  }

  if (c.variant.mask == MaskMode::kCustom) {
    const uint64_t seed = rng.engine()();
    const double dens = c.custom_density;
    const bool fm = c.fully_masked_rows;
    auto attend = [&](int64_t b, int64_t i, int64_t j) {
      if (fm && b == 0 && i % 3 == 0) return false;
      const uint64_t h = mix(seed ^ mix(uint64_t(b) * 0x100000001ULL + uint64_t(i) * 0x9E3779B1ULL + uint64_t(j)));
      return double(h >> 11) * 0x1.0p-53 < dens;
    };
    ref::PackedMask pm = ref::pack_custom_mask(p.qo_indptr, p.kv_indptr, attend);
    p.mask_bits = pm.bits;
    if (p.mask_bits.empty()) p.mask_bits.push_back(0);
    p.mask_indptr.assign(pm.indptr.begin(), pm.indptr.end());
    p.d_mask = DeviceBuffer::from(p.mask_bits);
    p.d_mask_indptr = DeviceBuffer::from(p.mask_indptr);
  }

  if (!c.paged) {
    p.d_k = DeviceBuffer::from(to_half_bits(c.dtype, p.k));
    p.d_v = DeviceBuffer::from(to_half_bits(c.dtype, p.v));
    p.d_kv_indptr = DeviceBuffer::from(p.kv_indptr);
  } else {
    const int64_t ps = c.page_size;
    p.page_indptr.assign(batch + 1, 0);
    p.last_page_len.assign(batch, 0);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t pages = (c.kv_lens[b] + ps - 1) / ps;
      p.page_indptr[b + 1] = static_cast<int32_t>(p.page_indptr[b] + pages);
      p.last_page_len[b] = pages ? static_cast<int32_t>(c.kv_lens[b] - (pages - 1) * ps) : 0;
    }
    const int64_t used = p.page_indptr[batch];
    p.num_pages = used + 3;  // a few pages nobody owns
    std::vector<int32_t> perm(p.num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    p.page_indices.assign(perm.begin(), perm.begin() + used);
    // Pools start as NaN: any slot the kernel reads but should not shows up in the output
    // (fp8: 0xFF, NaN in both formats).
    const int64_t pool = p.num_pages * ps * Hk * D;
    auto scatter = [&](auto& kb, auto& vb, const auto& ks, const auto& vs) {
      const size_t bytes = D * sizeof(ks[0]);
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < c.kv_lens[b]; ++t) {
          const int64_t page = p.page_indices[p.page_indptr[b] + t / ps], slot = t % ps;
          for (int64_t h = 0; h < Hk; ++h) {
            const int64_t dst = c.layout == KVLayout::kNHD ? ((page * ps + slot) * Hk + h) * D
                                                          : ((page * Hk + h) * ps + slot) * D;
            const int64_t src = ((p.kv_indptr[b] + t) * Hk + h) * D;
            std::memcpy(&kb[dst], &ks[src], bytes);
            std::memcpy(&vb[dst], &vs[src], bytes);
          }
        }
      }
      p.d_pages_k = DeviceBuffer::from(kb);
      p.d_pages_v = DeviceBuffer::from(vb);
    };
    if (c.kv_fp8) {
      std::vector<uint8_t> kb(pool, 0xFF), vb(pool, 0xFF);
      scatter(kb, vb, k8, v8);
    } else {
      std::vector<uint16_t> kb(pool, kNaNBits), vb(pool, kNaNBits);
      scatter(kb, vb, to_half_bits(c.dtype, p.k), to_half_bits(c.dtype, p.v));
    }
    std::vector<int32_t> idx = p.page_indices;
    if (idx.empty()) idx.push_back(0);
    p.d_page_indptr = DeviceBuffer::from(p.page_indptr);
    p.d_page_indices = DeviceBuffer::from(idx);
    std::vector<int32_t> last = p.last_page_len;
    if (last.empty()) last.push_back(0);
    p.d_last = DeviceBuffer::from(last);
  }
  p.d_out = DeviceBuffer(std::max<int64_t>(p.total_q * Hq * D, 1) * 2);
  p.d_lse = DeviceBuffer(std::max<int64_t>(p.total_q * Hq, 1) * 4);
  p.bounds.max_batch = static_cast<int32_t>(std::max<int64_t>(batch, 1));
  p.bounds.max_total_q = p.total_q;
  p.bounds.num_qo_heads = c.num_qo_heads;
  p.bounds.num_kv_heads = c.num_kv_heads;
  p.bounds.head_dim = c.head_dim;
  p.ws_bytes = BatchPrefillWrapper::workspace_size(p.bounds);
  p.d_ws = DeviceBuffer(p.ws_bytes);
}

void plan_only(BatchPrefillWrapper& w, Prepared& p, cudaStream_t stream) {
  const Case& c = p.c;
  const int32_t* mi = c.variant.mask == MaskMode::kCustom ? p.mask_indptr.data() : nullptr;
  if (c.paged) {
    w.plan_paged(p.qo_indptr.data(), p.table(), c.page_size, c.num_qo_heads, c.num_kv_heads,
                 c.head_dim, c.dtype, c.variant, p.d_ws.get(), p.ws_bytes, p.bounds, stream, mi, c.opt);
  } else {
    w.plan_ragged(p.qo_indptr.data(), p.kv_indptr.data(), static_cast<int32_t>(c.q_lens.size()),
                  c.num_qo_heads, c.num_kv_heads, c.head_dim, c.dtype, c.variant, p.d_ws.get(),
                  p.ws_bytes, p.bounds, stream, mi, c.opt);
  }
}

void run_only(BatchPrefillWrapper& w, Prepared& p, cudaStream_t stream) {
  const Case& c = p.c;
  const TensorView lse = p.lse_view();
  const CustomMaskDevice m = p.mask();
  const CustomMaskDevice* mp = c.variant.mask == MaskMode::kCustom ? &m : nullptr;
  if (c.paged) {
    w.run_paged(p.q_view(), p.cache(), p.table(), p.out_view(), &lse, stream, mp);
  } else {
    const int64_t tk = std::max<int64_t>(p.total_kv, 0);
    const TensorView k(p.d_k.get(), c.dtype, {tk, c.num_kv_heads, c.head_dim});
    const TensorView v(p.d_v.get(), c.dtype, {tk, c.num_kv_heads, c.head_dim});
    w.run_ragged(p.q_view(), k, v, p.d_kv_indptr.as<int32_t>(), p.out_view(), &lse, stream, mp);
  }
}

void plan_and_run(BatchPrefillWrapper& w, Prepared& p, cudaStream_t stream) {
  p.d_out.poison(stream);
  p.d_lse.poison(stream);
  plan_only(w, p, stream);
  run_only(w, p, stream);
}

std::vector<uint16_t> download_out(const Prepared& p) {
  return p.d_out.to_vector<uint16_t>(p.total_q * p.c.num_qo_heads * p.c.head_dim);
}
std::vector<float> download_lse(const Prepared& p) {
  return p.d_lse.to_vector<float>(p.total_q * p.c.num_qo_heads);
}

void check_against_reference(const Prepared& p) {
  const Case& c = p.c;
  ref::RaggedQ rq{p.q.data(), c.num_qo_heads, c.head_dim, p.qo_indptr};
  ref::RaggedKV rkv{p.k.data(), p.v.data(), c.num_kv_heads, c.head_dim, p.kv_indptr};
  ref::Options opt = ref::options_from(c.variant);
  opt.alibi_slopes.assign(c.alibi_slopes.begin(), c.alibi_slopes.end());
  if (c.variant.mask == MaskMode::kCustom) {
    opt.custom_mask = p.mask_bits.data();
    opt.mask_indptr.assign(p.mask_indptr.begin(), p.mask_indptr.end());
  }
  const ref::Result exact = ref::attention(rq, rkv, opt);
  const ref::Result low = ref::attention_low_precision(rq, rkv, opt, c.dtype);
  const Tolerance tol_o = tolerance_from_baseline(compare(ref::to_float(low.o), exact.o));
  const Tolerance tol_l = tolerance_from_baseline(compare(ref::to_float(low.lse), exact.lse));

  const std::vector<float> o = from_half_bits(c.dtype, download_out(p));
  const std::vector<float> lse = download_lse(p);
  const Comparison co = compare(o, exact.o);
  const Comparison cl = compare(lse, exact.lse);
  EXPECT_TRUE(within(co, tol_o)) << c.describe() << "\n  O: " << co.summary() << " tol rel "
                                 << tol_o.rel_l2 << " abs " << tol_o.max_abs;
  EXPECT_TRUE(within(cl, tol_l)) << c.describe() << "\n  LSE: " << cl.summary() << " tol rel "
                                 << tol_l.rel_l2 << " abs " << tol_l.max_abs;
}

void run_and_check(const Case& c, uint64_t salt) {
  Prepared p;
  prepare(p, c, salt);
  BatchPrefillWrapper w;
  plan_and_run(w, p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.describe();
  check_against_reference(p);
}

bool is_sm90() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

}  // namespace weft::test::prefill
