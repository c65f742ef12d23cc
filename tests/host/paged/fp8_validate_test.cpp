// fp8 page pools (host only): scale / dtype validation of validate_paged_kv and append_paged_kv.
// Every rejected call names the argument and throws before any launch (device pointers fake).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "paged/append_validate.h"
#include "paged_fixture.h"

namespace {

using weft::DType;
using weft::KVScale;
using weft::PagedKVCache;
using weft::TensorView;
using weft::test::fake_idx;
using weft::test::fake_ptr;
using weft::test::PagedFixture;
using weft::test::thrown_argument;

const float* fake_scale(int i) { return static_cast<const float*>(fake_ptr(200 + i)); }

struct Fp8Case {
  PagedFixture f;
  std::vector<float> ks{0.5f, 0.25f}, vs{1.f, 2.f};  // f.heads == 2
  KVScale k{fake_scale(0), nullptr, 2}, v{fake_scale(1), nullptr, 2};
  DType v_dtype = DType::kFloat8E4M3;
  Fp8Case() { f.dtype = DType::kFloat8E4M3; }
  PagedKVCache cache() const {
    PagedKVCache c = f.cache();
    c.v_pages.dtype = v_dtype;
    c.k_scale = k;
    c.v_scale = v;
    return c;
  }
  std::string validate() const {
    return thrown_argument([&] { weft::validate_paged_kv(cache(), f.table()); });
  }
  std::string append(DType in) const {
    std::vector<int32_t> b{0}, p{20};
    const TensorView nk(fake_ptr(10), in, {1, f.heads, f.head_dim}), nv(fake_ptr(11), in, {1, f.heads, f.head_dim});
    return thrown_argument([&] {
      weft::paged::validate_append(nk, nv, {fake_idx(10), b.data(), 1}, {fake_idx(11), p.data(), 1}, cache(),
                                   f.table());
    });
  }
};

TEST(Fp8Validate, AcceptsPerHeadAndPerTensorScales) {
  for (DType d : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    Fp8Case c;
    c.f.dtype = d;
    c.v_dtype = d;
    EXPECT_EQ(c.validate(), "<no throw>") << weft::dtype_name(d);
    c.k.size = 1;  // per tensor
    c.k.host = c.ks.data();
    c.v.host = c.vs.data();
    EXPECT_EQ(c.validate(), "<no throw>");
    for (int64_t hd : {64, 128, 256}) {
      c.f.head_dim = hd;
      EXPECT_EQ(c.validate(), "<no throw>") << hd;
    }
  }
}

TEST(Fp8Validate, MissingOrMisshapedScales) {
  {
    Fp8Case c;
    c.k = KVScale{};
    EXPECT_EQ(c.validate(), "k_scale");
  }
  {
    Fp8Case c;
    c.v.device = nullptr;
    EXPECT_EQ(c.validate(), "v_scale");
  }
  {
    Fp8Case c;
    c.k.size = 3;  // neither 1 nor num_kv_heads
    EXPECT_EQ(c.validate(), "k_scale");
  }
  {
    Fp8Case c;
    c.v.device = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(fake_scale(1)) + 2);  // misaligned
    EXPECT_EQ(c.validate(), "v_scale");
  }
}

TEST(Fp8Validate, BadHostScaleValues) {
  for (float bad : {0.f, -1.f, NAN, INFINITY}) {
    Fp8Case c;
    c.vs[1] = bad;
    c.v.host = c.vs.data();
    EXPECT_EQ(c.validate(), "v_scale") << bad;
  }
}

TEST(Fp8Validate, DtypeScaleMismatch) {
  {
    Fp8Case c;  // scales given for a 16-bit cache
    c.f.dtype = DType::kBFloat16;
    c.v_dtype = DType::kBFloat16;
    EXPECT_EQ(c.validate(), "k_scale");
  }
  {
    Fp8Case c;  // K e4m3, V e5m2
    c.v_dtype = DType::kFloat8E5M2;
    EXPECT_EQ(c.validate(), "v_pages");
  }
  {
    Fp8Case c;  // K e4m3, V bf16
    c.v_dtype = DType::kBFloat16;
    EXPECT_EQ(c.validate(), "v_pages");
  }
}

TEST(Fp8Validate, AppendInputDtypes) {
  Fp8Case c;
  EXPECT_EQ(c.append(DType::kBFloat16), "<no throw>");
  EXPECT_EQ(c.append(DType::kFloat16), "<no throw>");
  EXPECT_EQ(c.append(DType::kFloat8E4M3), "new_k");  // already quantized input: not an append
  EXPECT_EQ(c.append(DType::kFloat32), "new_k");
  Fp8Case missing;
  missing.k = KVScale{};
  EXPECT_EQ(missing.append(DType::kBFloat16), "k_scale");
}

}  // namespace
