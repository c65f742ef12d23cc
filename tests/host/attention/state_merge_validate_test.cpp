// Host tests (no GPU): argument checks of the public state merge (weft/merge.h). Every bad call
// throws weft::Error naming the argument before any launch (the fake device addresses below are
// never dereferenced); empty calls (seq 0 or heads 0) are accepted and launch nothing.
#include <gtest/gtest.h>

#include <cstdint>

#include "attention/state_merge.h"
#include "common/test_util.h"
#include "weft/error.h"
#include "weft/merge.h"

namespace {

using weft::DType;
using weft::TensorView;
using weft::test::thrown_argument;

// Fake device addresses 1 MiB apart (each tensor below fits in 1 MiB).
void* fake(uintptr_t mib) { return weft::test::fake_device_ptr(mib); }
using weft::test::byte_offset;

constexpr int64_t S = 5, H = 4, D = 128;
const DType f16 = DType::kFloat16;
const DType f32 = DType::kFloat32;
cudaStream_t kStream = nullptr;

TEST(StateMergeValidate, MergeStateNamesTheArgument) {
  TensorView va(fake(1), f16, {S, H, D}), vb(fake(2), f16, {S, H, D}), vo(fake(3), f16, {S, H, D});
  TensorView sa(fake(4), f32, {S, H}), sb(fake(5), f32, {S, H}), so(fake(6), f32, {S, H});
  auto call = [&](const TensorView& a, const TensorView& as, const TensorView& b, const TensorView& bs,
                  const TensorView& o, const TensorView* os) {
    return thrown_argument([&] { weft::merge_state(a, as, b, bs, o, os, kStream); });
  };
  // v_a: rank, dtype, head_dim range / vector multiple, device, null, alignment, row stride
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, D}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), DType::kInt32, {S, H, D}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, 4}), sa, TensorView(fake(2), f16, {S, H, 4}), sb,
                 TensorView(fake(3), f16, {S, H, 4}), &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, 12}), sa, vb, sb, vo, &so), "v_a");  // 24 bytes
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, 2048}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, D}, weft::Device::kCPU), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(nullptr, f16, {S, H, D}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(byte_offset(fake(1), 2), f16, {S, H, D}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, D}, {H * D + 4, D, 1}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, D}, {H * D, D, 2}), sa, vb, sb, vo, &so), "v_a");
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, D}, {-H * D, D, 1}), sa, vb, sb, vo, &so), "v_a");
  // s_a: shape, dtype, device, alignment
  EXPECT_EQ(call(va, TensorView(fake(4), f32, {S, H + 1}), vb, sb, vo, &so), "s_a");
  EXPECT_EQ(call(va, TensorView(fake(4), f32, {S * H}), vb, sb, vo, &so), "s_a");
  EXPECT_EQ(call(va, TensorView(fake(4), f16, {S, H}), vb, sb, vo, &so), "s_a");
  EXPECT_EQ(call(va, TensorView(fake(4), f32, {S, H}, weft::Device::kCPU), vb, sb, vo, &so), "s_a");
  EXPECT_EQ(call(va, TensorView(byte_offset(fake(4), 2), f32, {S, H}), vb, sb, vo, &so), "s_a");
  // v_b / s_b
  EXPECT_EQ(call(va, sa, TensorView(fake(2), DType::kBFloat16, {S, H, D}), sb, vo, &so), "v_b");
  EXPECT_EQ(call(va, sa, TensorView(fake(2), f16, {S, H + 1, D}), sb, vo, &so), "v_b");
  EXPECT_EQ(call(va, sa, vb, TensorView(fake(5), f32, {S + 1, H}), vo, &so), "s_b");
  // v_out: dtype, shape, overlap with an input, rows sharing addresses
  EXPECT_EQ(call(va, sa, vb, sb, TensorView(fake(3), f32, {S, H, D}), &so), "v_out");
  EXPECT_EQ(call(va, sa, vb, sb, TensorView(fake(3), f16, {S, H, D / 2}), &so), "v_out");
  EXPECT_EQ(call(va, sa, vb, sb, TensorView(byte_offset(fake(1), 256), f16, {S, H, D}), &so), "v_out");
  EXPECT_EQ(call(va, sa, vb, sb, TensorView(fake(3), f16, {S, H, D}, {0, D, 1}), &so), "v_out");
  EXPECT_EQ(call(va, sa, vb, sb, va, &so), "v_out");  // in place is merge_state_in_place's job
  // s_out: shape, dtype, overlap with an input or v_out, rows sharing addresses
  TensorView so_bad(fake(6), f32, {S, H - 1});
  EXPECT_EQ(call(va, sa, vb, sb, vo, &so_bad), "s_out");
  TensorView so_f16(fake(6), f16, {S, H});
  EXPECT_EQ(call(va, sa, vb, sb, vo, &so_f16), "s_out");
  TensorView so_on_sb(byte_offset(fake(5), 4), f32, {S, H});
  EXPECT_EQ(call(va, sa, vb, sb, vo, &so_on_sb), "s_out");
  TensorView so_on_vo(fake(3), f32, {S, H});
  EXPECT_EQ(call(va, sa, vb, sb, vo, &so_on_vo), "s_out");
  TensorView so_bcast(fake(6), f32, {S, H}, {1, 1});
  EXPECT_EQ(call(va, sa, vb, sb, vo, &so_bcast), "s_out");
  // Empty: validated, nothing launched (no GPU needed).
  EXPECT_EQ(call(TensorView(fake(1), f16, {0, H, D}), TensorView(fake(4), f32, {0, H}),
                 TensorView(fake(2), f16, {0, H, D}), TensorView(fake(5), f32, {0, H}),
                 TensorView(fake(3), f16, {0, H, D}), nullptr), "<no throw>");
  EXPECT_EQ(call(TensorView(nullptr, f16, {S, 0, D}), TensorView(nullptr, f32, {S, 0}),
                 TensorView(nullptr, f16, {S, 0, D}), TensorView(nullptr, f32, {S, 0}),
                 TensorView(nullptr, f16, {S, 0, D}), nullptr), "<no throw>");
}

TEST(StateMergeValidate, InPlaceNamesTheArgument) {
  TensorView v(fake(1), f16, {S, H, D}), vo(fake(2), f16, {S, H, D});
  TensorView s(fake(3), f32, {S, H}), so(fake(4), f32, {S, H});
  TensorView mask(fake(5), DType::kUInt8, {S});
  auto call = [&](const TensorView& a, const TensorView& as, const TensorView& b, const TensorView& bs,
                  const TensorView* m) {
    return thrown_argument([&] { weft::merge_state_in_place(a, as, b, bs, m, kStream); });
  };
  EXPECT_EQ(call(TensorView(fake(1), f16, {S, H, D}, {0, D, 1}), s, vo, so, nullptr), "v");  // shared rows
  EXPECT_EQ(call(v, TensorView(fake(3), f32, {S, H}, {0, 1}), vo, so, nullptr), "s");
  EXPECT_EQ(call(v, TensorView(byte_offset(fake(1), 64), f32, {S, H}), vo, so, nullptr), "s");  // inside v
  EXPECT_EQ(call(v, s, TensorView(fake(2), f32, {S, H, D}), so, nullptr), "v_other");
  EXPECT_EQ(call(v, s, TensorView(byte_offset(fake(1), 16), f16, {S, H, D}), so, nullptr), "v_other");  // overlaps v
  EXPECT_EQ(call(v, s, vo, TensorView(fake(3), f32, {S, H}), nullptr), "s_other");  // is s
  EXPECT_EQ(call(v, s, vo, TensorView(fake(4), f32, {H, S}), nullptr), "s_other");
  TensorView m_i32(fake(5), DType::kInt32, {S});
  EXPECT_EQ(call(v, s, vo, so, &m_i32), "mask");
  TensorView m_len(fake(5), DType::kUInt8, {S + 1});
  EXPECT_EQ(call(v, s, vo, so, &m_len), "mask");
  TensorView m_cpu(fake(5), DType::kUInt8, {S}, weft::Device::kCPU);
  EXPECT_EQ(call(v, s, vo, so, &m_cpu), "mask");
  TensorView m_strided(fake(5), DType::kUInt8, {S}, {2});
  EXPECT_EQ(call(v, s, vo, so, &m_strided), "mask");
  TensorView m_in_s(fake(3), DType::kUInt8, {S});
  EXPECT_EQ(call(v, s, vo, so, &m_in_s), "mask");
  TensorView m0(fake(5), DType::kUInt8, {0});
  EXPECT_EQ(call(TensorView(fake(1), f16, {0, H, D}), TensorView(fake(3), f32, {0, H}),
                 TensorView(fake(2), f16, {0, H, D}), TensorView(fake(4), f32, {0, H}), &m0), "<no throw>");
}

TEST(StateMergeValidate, MergeStatesNamesTheArgument) {
  const int64_t N = 3;
  TensorView v(fake(1), DType::kBFloat16, {S, N, H, D}), vo(fake(2), DType::kBFloat16, {S, H, D});
  TensorView s(fake(3), f32, {S, N, H}), so(fake(4), f32, {S, H});
  auto call = [&](const TensorView& a, const TensorView& as, const TensorView& o, const TensorView* os) {
    return thrown_argument([&] { weft::merge_states(a, as, o, os, kStream); });
  };
  EXPECT_EQ(call(TensorView(fake(1), DType::kBFloat16, {S, H, D}), s, vo, &so), "v");
  EXPECT_EQ(call(TensorView(fake(1), DType::kBFloat16, {S, 0, H, D}), TensorView(fake(3), f32, {S, 0, H}), vo, &so),
            "v");
  EXPECT_EQ(call(TensorView(fake(1), DType::kFloat8E4M3, {S, N, H, D}), s, vo, &so), "v");
  EXPECT_EQ(call(v, TensorView(fake(3), f32, {S, N + 1, H}), vo, &so), "s");
  EXPECT_EQ(call(v, TensorView(fake(3), f32, {S, H, N}), vo, &so), "s");
  EXPECT_EQ(call(v, s, TensorView(fake(2), DType::kBFloat16, {S, N, H, D}), &so), "v_out");
  EXPECT_EQ(call(v, s, TensorView(fake(2), f16, {S, H, D}), &so), "v_out");
  EXPECT_EQ(call(v, s, TensorView(fake(2), DType::kBFloat16, {S, H + 1, D}), &so), "v_out");
  EXPECT_EQ(call(v, s, TensorView(byte_offset(fake(1), S * N * H * D * 2 - 16), DType::kBFloat16, {S, H, D}), &so),
            "v_out");
  TensorView so_in_s(byte_offset(fake(3), 8), f32, {S, H});
  EXPECT_EQ(call(v, s, vo, &so_in_s), "s_out");
  // Strided (non-contiguous) inputs are fine: state dim outermost, for example.
  EXPECT_EQ(thrown_argument([&] {
              TensorView vt(fake(1), DType::kBFloat16, {0, N, H, D}, {H * D, S * H * D, D, 1});
              const TensorView vo0(fake(2), DType::kBFloat16, {0, H, D});
              weft::merge_states(vt, TensorView(fake(3), f32, {0, N, H}), vo0, nullptr, kStream);
            }), "<no throw>");
  // f32 v: head_dim a multiple of 4 (16 bytes).
  EXPECT_EQ(call(TensorView(fake(1), f32, {S, N, H, 12}), TensorView(fake(3), f32, {S, N + 1, H}),
                 TensorView(fake(2), f32, {S, H, 12}), nullptr), "s")
      << "12 f32 = 48 bytes passes v's checks; the bad s shape is the first error";
  EXPECT_EQ(call(TensorView(fake(1), f32, {S, N, H, 10}), s, TensorView(fake(2), f32, {S, H, 10}), nullptr), "v");
}

TEST(StateMergeLayout, ThreadsPerRowCoverTheRowWithinAWarp) {
  using weft::attn::state_merge_threads_per_row;
  EXPECT_EQ(state_merge_threads_per_row(64, DType::kFloat16), 8);    // 8 vectors
  EXPECT_EQ(state_merge_threads_per_row(128, DType::kBFloat16), 16);
  EXPECT_EQ(state_merge_threads_per_row(256, DType::kFloat16), 32);
  EXPECT_EQ(state_merge_threads_per_row(256, DType::kFloat32), 32);  // 64 vectors: 2 per thread
  EXPECT_EQ(state_merge_threads_per_row(72, DType::kFloat16), 16);   // 9 vectors
  EXPECT_EQ(state_merge_threads_per_row(8, DType::kFloat16), 1);
  EXPECT_EQ(state_merge_threads_per_row(weft::kMergeMaxHeadDim, DType::kFloat32), 32);
}

}  // namespace
