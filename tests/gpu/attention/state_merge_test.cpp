// GPU tests of the public state merge (weft/merge.h) against the float64 merge reference
// (reference/merge.h): f16 / bf16 / f32 v, head_dim 64 / 128 / 256, num_states 1..17, random
// natural-log LSEs with -inf states (whose v is NaN: it must be skipped) and fully -inf rows
// (O = 0, LSE = -inf), strided views, outputs poisoned before every run, bitwise determinism over
// two runs, the in-place form with a mask, and a rejected call that leaves the outputs untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/gpu_util.h"
#include "common/test_util.h"
#include "reference/merge.h"
#include "weft/error.h"
#include "weft/merge.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::test::DeviceBuffer;

const float kNegInf = -std::numeric_limits<float>::infinity();

// Storage bytes of floats already representable in dt (f16 / bf16 / f32); NaN for flagged entries.
std::vector<uint8_t> to_bytes(DType dt, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * weft::dtype_size(dt));
  if (dt == DType::kFloat32) {
    std::memcpy(b.data(), v.data(), b.size());
  } else {
    const auto bits = weft::test::to_half_bits(dt, v);
    std::memcpy(b.data(), bits.data(), b.size());
  }
  return b;
}
std::vector<float> from_bytes(DType dt, const std::vector<uint8_t>& b) {
  const std::size_t n = b.size() / weft::dtype_size(dt);
  std::vector<float> v(n);
  if (dt == DType::kFloat32) {
    std::memcpy(v.data(), b.data(), b.size());
  } else {
    std::vector<uint16_t> bits(n);
    std::memcpy(bits.data(), b.data(), b.size());
    v = weft::test::from_half_bits(dt, bits);
  }
  return v;
}

// n states of [seq, heads] rows: v[t][k][h][d] and s[t][k][h] (float, v rounded to dt). A state
// at -inf gets NaN values (a kernel that multiplies instead of skipping shows NaN). Row 0 of
// head 0 is all -inf when `empty_row`.
struct States {
  int64_t seq, n, heads, d;
  std::vector<float> v, s;
  std::vector<bool> nan_v;  // per (t, k, h): v stored as NaN
  float& vat(int64_t t, int64_t k, int64_t h, int64_t i) { return v[((t * n + k) * heads + h) * d + i]; }
  float& sat(int64_t t, int64_t k, int64_t h) { return s[(t * n + k) * heads + h]; }
};

States make_states(weft::test::Rng& rng, DType dt, int64_t seq, int64_t n, int64_t heads, int64_t d,
                   bool empty_row = true) {
  States st{seq, n, heads, d, rng.uniform_vec(seq * n * heads * d, -2.0, 2.0), {}, {}};
  weft::test::round_inplace(dt, st.v);
  st.s.resize(seq * n * heads);
  st.nan_v.assign(seq * n * heads, false);
  for (std::size_t i = 0; i < st.s.size(); ++i) {
    // A spread of 24 nats: weights from 1 down to ~e^-24 (fp32 weights, no underflow).
    st.s[i] = static_cast<float>(rng.uniform(-12.0, 12.0));
    if (rng.uniform(0.0, 1.0) < 0.2) st.s[i] = kNegInf;
  }
  if (empty_row)
    for (int64_t k = 0; k < n; ++k) st.sat(0, k, 0) = kNegInf;
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t h = 0; h < heads; ++h)
        st.nan_v[(t * n + k) * heads + h] = st.sat(t, k, h) == kNegInf;
  return st;
}

// Storage of the states' v as [seq, n, heads, d] with NaN for -inf states.
std::vector<uint8_t> v_bytes(DType dt, States& st) {
  std::vector<uint8_t> b = to_bytes(dt, st.v);
  const std::size_t es = weft::dtype_size(dt);
  for (std::size_t r = 0; r < st.nan_v.size(); ++r)
    if (st.nan_v[r]) std::memset(b.data() + r * st.d * es, 0xFF, st.d * es);
  return b;
}

// The two states of a 2-state set as separate [seq, heads, d] / [seq, heads] tensors (storage).
void split_two(DType dt, States& st, std::vector<uint8_t>& a, std::vector<uint8_t>& b, std::vector<float>& sa,
               std::vector<float>& sb) {
  const std::size_t es = weft::dtype_size(dt), row = st.d * es;
  const std::vector<uint8_t> all = v_bytes(dt, st);
  a.assign(st.seq * st.heads * row, 0);
  b.assign(a.size(), 0);
  sa.assign(st.seq * st.heads, 0.f);
  sb.assign(sa.size(), 0.f);
  for (int64_t t = 0; t < st.seq; ++t)
    for (int64_t h = 0; h < st.heads; ++h) {
      std::memcpy(&a[(t * st.heads + h) * row], &all[((t * 2 + 0) * st.heads + h) * row], row);
      std::memcpy(&b[(t * st.heads + h) * row], &all[((t * 2 + 1) * st.heads + h) * row], row);
      sa[t * st.heads + h] = st.sat(t, 0, h);
      sb[t * st.heads + h] = st.sat(t, 1, h);
    }
}

// float64 merge of every (t, h) over the states in order: o [seq, heads, d], lse [seq, heads].
weft::ref::Result reference(States& st) {
  weft::ref::Result r;
  r.o.assign(st.seq * st.heads * st.d, 0.0);
  r.lse.assign(st.seq * st.heads, 0.0);
  std::vector<double> acc(st.d), ov(st.d);
  for (int64_t t = 0; t < st.seq; ++t)
    for (int64_t h = 0; h < st.heads; ++h) {
      double l = -std::numeric_limits<double>::infinity();
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < st.n; ++k) {
        for (int64_t i = 0; i < st.d; ++i) ov[i] = st.vat(t, k, h, i);
        weft::ref::merge_state(acc.data(), l, ov.data(), st.sat(t, k, h), st.d, acc.data(), &l);
      }
      std::copy(acc.begin(), acc.end(), r.o.begin() + (t * st.heads + h) * st.d);
      r.lse[t * st.heads + h] = l;
    }
  return r;
}

void expect_close(const std::vector<float>& got_v, const std::vector<float>& got_s, const weft::ref::Result& ref,
                  DType dt, const std::string& what) {
  std::vector<float> rounded(ref.o.size());
  for (std::size_t i = 0; i < rounded.size(); ++i) rounded[i] = weft::test::round_to(dt, static_cast<float>(ref.o[i]));
  const auto base = weft::test::compare(rounded, ref.o);
  const auto tol = weft::test::tolerance_from_baseline(base, 4.0, 1e-5, 1e-5);
  const auto cmp = weft::test::compare(got_v, ref.o);
  EXPECT_TRUE(weft::test::within(cmp, tol))
      << what << " v: " << cmp.summary() << " (baseline " << base.summary() << ")";
  ASSERT_EQ(got_s.size(), ref.lse.size());
  for (std::size_t i = 0; i < got_s.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      EXPECT_TRUE(std::isinf(got_s[i]) && got_s[i] < 0) << what << " lse[" << i << "] = " << got_s[i] << ", want -inf";
    } else {
      EXPECT_NEAR(got_s[i], ref.lse[i], 2e-6 * (1.0 + std::fabs(ref.lse[i]))) << what << " lse[" << i << "]";
    }
  }
  // Rows with no state: exactly O = 0.
  for (std::size_t r = 0; r < ref.lse.size(); ++r)
    if (std::isinf(ref.lse[r]))
      for (int64_t i = 0; i < static_cast<int64_t>(ref.o.size() / ref.lse.size()); ++i)
        ASSERT_EQ(got_v[r * (ref.o.size() / ref.lse.size()) + i], 0.f) << what << " empty row " << r;
}

std::string name_of(DType dt, int64_t n, int64_t d) {
  return std::string(weft::dtype_name(dt)) + " num_states " + std::to_string(n) + " head_dim " + std::to_string(d);
}

// merge_states over [seq, n, heads, d] (contiguous, or with the state dim outermost in memory).
void run_merge_states(DType dt, int64_t n, int64_t d, bool state_outer) {
  const int64_t salt = n * 1009 + d * 7 + int(dt) + (state_outer ? 5 : 0);
  auto rng = weft::test::Rng::for_current_test(static_cast<uint64_t>(salt));
  const int64_t seq = 7, heads = 3;
  States st = make_states(rng, dt, seq, n, heads, d);
  const std::size_t es = weft::dtype_size(dt);
  std::vector<uint8_t> vb = v_bytes(dt, st);
  std::vector<float> sb = st.s;
  // state_outer: memory [n, seq, heads, d] / [n, seq, heads], viewed as [seq, n, heads, d].
  std::vector<int64_t> vstr = {n * heads * d, heads * d, d, 1}, sstr = {n * heads, heads, 1};
  if (state_outer) {
    std::vector<uint8_t> pv(vb.size());
    std::vector<float> ps(sb.size());
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t k = 0; k < n; ++k)
        for (int64_t h = 0; h < heads; ++h) {
          std::memcpy(&pv[((k * seq + t) * heads + h) * d * es], &vb[((t * n + k) * heads + h) * d * es], d * es);
          ps[(k * seq + t) * heads + h] = sb[(t * n + k) * heads + h];
        }
    vb.swap(pv);
    sb.swap(ps);
    vstr = {heads * d, seq * heads * d, d, 1};
    sstr = {heads, seq * heads, 1};
  }
  DeviceBuffer dv = DeviceBuffer::from(vb), ds = DeviceBuffer::from(sb);
  DeviceBuffer dvo(seq * heads * d * es), dso(seq * heads * 4);
  TensorView tv(dv.get(), dt, {seq, n, heads, d}, {vstr[0], vstr[1], vstr[2], vstr[3]});
  TensorView ts(ds.get(), DType::kFloat32, {seq, n, heads}, {sstr[0], sstr[1], sstr[2]});
  TensorView tvo(dvo.get(), dt, {seq, heads, d}), tso(dso.get(), DType::kFloat32, {seq, heads});
  std::vector<uint8_t> first_v;
  std::vector<float> first_s;
  for (int run = 0; run < 2; ++run) {
    dvo.poison();
    dso.poison();
    weft::merge_states(tv, ts, tvo, &tso, nullptr);
    WEFT_TEST_CUDA(cudaDeviceSynchronize());
    const auto got_vb = dvo.to_vector<uint8_t>(dvo.bytes());
    const auto got_s = dso.to_vector<float>(seq * heads);
    if (run == 0) {
      expect_close(from_bytes(dt, got_vb), got_s, reference(st), dt,
                   name_of(dt, n, d) + (state_outer ? " (state dim outermost)" : ""));
      first_v = got_vb;
      first_s = got_s;
    } else {
      EXPECT_EQ(got_vb, first_v) << "v not bitwise deterministic: " << name_of(dt, n, d);
      EXPECT_EQ(std::memcmp(got_s.data(), first_s.data(), got_s.size() * 4), 0) << "lse not deterministic";
    }
  }
}

TEST(StateMergeGpu, MergeStatesVsReference) {
  WEFT_REQUIRE_GPU();
  for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat32})
    for (int64_t d : {64, 128, 256})
      for (int64_t n : {1, 2, 3, 7, 8, 9, 16, 17}) {
        run_merge_states(dt, n, d, false);
        if (HasFatalFailure()) return;
      }
}

TEST(StateMergeGpu, MergeStatesStridedStateDim) {
  WEFT_REQUIRE_GPU();
  for (DType dt : {DType::kBFloat16, DType::kFloat32})
    for (int64_t n : {2, 5, 17}) run_merge_states(dt, n, 128, true);
}

TEST(StateMergeGpu, MergeStatesOddHeadDimAndManyStates) {
  WEFT_REQUIRE_GPU();
  run_merge_states(DType::kFloat16, 40, 72, false);  // 9 vectors per row: a partial thread group
  run_merge_states(DType::kFloat32, 3, 512, false);  // 4 vectors per thread
  run_merge_states(DType::kBFloat16, 100, 8, false);  // 1 thread per row, many batches
}

// Two states in separate tensors, v_out with a padded row stride, s_out given or not.
TEST(StateMergeGpu, MergeStateTwoTensorsVsReference) {
  WEFT_REQUIRE_GPU();
  for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat32})
    for (int64_t d : {64, 128, 256})
      for (bool with_s : {true, false}) {
        auto rng = weft::test::Rng::for_current_test(static_cast<uint64_t>(d + int(dt) * 31 + with_s));
        const int64_t seq = 33, heads = 5, pad = 16 / static_cast<int64_t>(weft::dtype_size(dt));
        States st = make_states(rng, dt, seq, 2, heads, d);
        const std::size_t es = weft::dtype_size(dt);
        std::vector<uint8_t> a, b;
        std::vector<float> sa, sb;
        split_two(dt, st, a, b, sa, sb);
        DeviceBuffer dva = DeviceBuffer::from(a), dvb = DeviceBuffer::from(b);
        DeviceBuffer dsa = DeviceBuffer::from(sa), dsb = DeviceBuffer::from(sb);
        const int64_t row = heads * d + pad;  // padded token stride of v_out
        DeviceBuffer dvo(seq * row * es), dso(seq * heads * 4);
        dvo.poison();
        dso.poison();
        TensorView tvo(dvo.get(), dt, {seq, heads, d}, {row, d, 1});
        TensorView tso(dso.get(), DType::kFloat32, {seq, heads});
        const TensorView tsa(dsa.get(), DType::kFloat32, {seq, heads}), tsb(dsb.get(), DType::kFloat32, {seq, heads});
        const TensorView tva(dva.get(), dt, {seq, heads, d}), tvb(dvb.get(), dt, {seq, heads, d});
        weft::merge_state(tva, tsa, tvb, tsb, tvo, with_s ? &tso : nullptr, nullptr);
        WEFT_TEST_CUDA(cudaDeviceSynchronize());
        const auto raw = dvo.to_vector<uint8_t>(dvo.bytes());
        std::vector<uint8_t> packed(seq * heads * d * es);
        for (int64_t t = 0; t < seq; ++t) {
          std::memcpy(&packed[t * heads * d * es], &raw[t * row * es], heads * d * es);
          for (std::size_t i = heads * d * es; i < static_cast<std::size_t>(row) * es; ++i)
            ASSERT_EQ(raw[t * row * es + i], 0xFF) << "padding written";
        }
        const auto ref = reference(st);
        std::vector<float> got_s = dso.to_vector<float>(seq * heads);
        if (!with_s) {
          for (float x : got_s) ASSERT_TRUE(std::isnan(x)) << "s_out = nullptr must not write";
          got_s.assign(ref.lse.begin(), ref.lse.end());
        }
        expect_close(from_bytes(dt, packed), got_s, ref, dt, name_of(dt, 2, d) + " merge_state");
      }
}

// In place with a mask: masked tokens keep their bits; the others equal merge_state's output.
TEST(StateMergeGpu, InPlaceWithMask) {
  WEFT_REQUIRE_GPU();
  const DType dt = DType::kBFloat16;
  const int64_t seq = 9, heads = 4, d = 128;
  auto rng = weft::test::Rng::for_current_test();
  States st = make_states(rng, dt, seq, 2, heads, d);
  const std::size_t es = weft::dtype_size(dt);
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb;
  split_two(dt, st, a, b, sa, sb);
  std::vector<uint8_t> mask(seq);
  for (int64_t t = 0; t < seq; ++t) mask[t] = (t % 3 == 1) ? 0 : 1;
  DeviceBuffer dv = DeviceBuffer::from(a), dvb = DeviceBuffer::from(b), ds = DeviceBuffer::from(sa),
               dsb = DeviceBuffer::from(sb), dm = DeviceBuffer::from(mask);
  DeviceBuffer ref_v(a.size()), ref_s(sa.size() * 4);
  TensorView tv(dv.get(), dt, {seq, heads, d}), tvb(dvb.get(), dt, {seq, heads, d});
  TensorView ts(ds.get(), DType::kFloat32, {seq, heads}), tsb(dsb.get(), DType::kFloat32, {seq, heads});
  TensorView tref_v(ref_v.get(), dt, {seq, heads, d}), tref_s(ref_s.get(), DType::kFloat32, {seq, heads});
  ref_v.poison();
  ref_s.poison();
  weft::merge_state(tv, ts, tvb, tsb, tref_v, &tref_s, nullptr);
  TensorView tm(dm.get(), DType::kUInt8, {seq});
  weft::merge_state_in_place(tv, ts, tvb, tsb, &tm, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  const auto got_v = dv.to_vector<uint8_t>(a.size()), want_v = ref_v.to_vector<uint8_t>(a.size());
  const auto got_s = ds.to_vector<float>(sa.size()), want_s = ref_s.to_vector<float>(sa.size());
  const std::size_t row = heads * d * es;
  for (int64_t t = 0; t < seq; ++t) {
    const auto* want = mask[t] ? &want_v[t * row] : &a[t * row];
    EXPECT_EQ(std::memcmp(&got_v[t * row], want, row), 0) << "token " << t << " mask " << int(mask[t]);
    for (int64_t h = 0; h < heads; ++h) {
      const float w = mask[t] ? want_s[t * heads + h] : sa[t * heads + h];
      EXPECT_EQ(std::memcmp(&got_s[t * heads + h], &w, 4), 0) << "lse token " << t << " head " << h;
    }
  }
  // Unmasked in place (all tokens) equals the out-of-place merge bit for bit.
  dv.upload(a.data(), a.size());
  ds.upload(sa.data(), sa.size() * 4);
  weft::merge_state_in_place(tv, ts, tvb, tsb, nullptr, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(dv.to_vector<uint8_t>(a.size()), want_v);
  const auto all_s = ds.to_vector<float>(sa.size());
  EXPECT_EQ(std::memcmp(all_s.data(), want_s.data(), all_s.size() * 4), 0);
}

// A rejected call writes nothing and leaves the context clean; seq 0 is a no-op.
TEST(StateMergeGpu, RejectedAndEmptyCallsWriteNothing) {
  WEFT_REQUIRE_GPU();
  const DType dt = DType::kFloat16;
  const int64_t seq = 4, heads = 2, d = 64;
  DeviceBuffer dv(seq * 2 * heads * d * 2), ds(seq * 2 * heads * 4), dvo(seq * heads * d * 2), dso(seq * heads * 4);
  dv.poison();
  ds.poison();
  dvo.poison();
  dso.poison();
  TensorView tv(dv.get(), dt, {seq, 2, heads, d}), ts(ds.get(), DType::kFloat32, {seq, 2, heads});
  TensorView tvo(dvo.get(), dt, {seq, heads, d});
  TensorView bad_s(dso.get(), DType::kFloat32, {seq, heads + 1});
  EXPECT_EQ(weft::test::thrown_argument([&] { weft::merge_states(tv, ts, tvo, &bad_s, nullptr); }), "s_out");
  TensorView empty_v(dv.get(), dt, {0, 2, heads, d}), empty_s(ds.get(), DType::kFloat32, {0, 2, heads});
  TensorView empty_vo(dvo.get(), dt, {0, heads, d}), empty_so(dso.get(), DType::kFloat32, {0, heads});
  weft::merge_states(empty_v, empty_s, empty_vo, &empty_so, nullptr);
  WEFT_TEST_CUDA(cudaDeviceSynchronize());
  WEFT_TEST_CUDA(cudaGetLastError());
  for (uint8_t x : dvo.to_vector<uint8_t>(dvo.bytes())) ASSERT_EQ(x, 0xFF);
  for (uint8_t x : dso.to_vector<uint8_t>(dso.bytes())) ASSERT_EQ(x, 0xFF);
}

}  // namespace
