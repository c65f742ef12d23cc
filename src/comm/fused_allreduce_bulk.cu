// Fused all-reduce + residual add + RMSNorm, "bulk" kernel: the push kernel's protocol
// (fused_common.cuh, fused_allreduce_norm.cu's header comment: phases A / B / C, two LSA barriers
// per chunk, CTA c <-> CTA c of every peer) with every byte moved by TMA bulk copies
// (cp.async.bulk) through shared memory instead of register-staged 16-byte loads/stores.
// Why: the push kernel is bounded by memory requests in flight per SM (~35 GB/s per SM per
// direction with ~80 KB of registers in flight, docs/perf-notes-comm.md); bulk copies keep
// 100-200 KB per SM in flight with one issuing thread.
//
// Grid: num_ctas CTAs x 256 threads (8 warps = the 8 canonical sum-of-squares segments), 1 CTA
// per SM, dynamic shared memory kBulkSmem (224 KB) used by one phase at a time:
//   A, C (copies): a ring of kRingSlots x 16 KB; thread 0 keeps kRingAhead loads (global ->
//     shared, mbarrier completion) in flight and turns each landed chunk into a bulk store
//     (shared -> global, bulk async-group); a slot is reloaded once its store read it
//     (wait_group.read). A: local x -> peer staging (NVLink stores); C: local symmetric output
//     -> out.
//   B (reduce + norm): bulk_stages stages of (world + 1) rows (the world contributions in rank
//     order, own x row in slot `rank`, then the residual row) + 2 output buffers of 2 rows
//     (rounded residual, normalized row). Thread 0 keeps up to bulk_stages row jobs loading; all
//     threads: wait for the row, warp w sums segment w (fp32, rank order, + residual, round),
//     sum of squares exactly as the push kernel (canonical order), normalize into the output
//     buffer; thread 0 bulk-stores the residual row, the normalized row to out and (two-shot) to
//     every peer's symmetric output.
// Bits: identical to the push kernel (same operations in the same order per element).
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <atomic>

#include "comm/bulk_copy.cuh"
#include "comm/comm_impl.h"
#include "comm/fused_common.cuh"
#include "common/cuda_check.h"
#include "common/types.cuh"
#include "common/vec8.cuh"

namespace weft::comm_detail {
namespace {

constexpr int kBulkBlock = 256;
constexpr int kBulkWarps = kBulkBlock / 32;
static_assert(kBulkWarps == kCanonSegs, "warp w computes canonical segment w");
// Copy ring: 12 x 16 KB = 192 KB; 6 chunks (96 KB) loading while up to 6 (96 KB) are stored.
// 16 KB = one bf16 row of hidden 8192; large enough that one thread's issue rate (a few
// instructions per chunk) is irrelevant.
constexpr int kRingSlots = 12;
constexpr int kRingAhead = 6;
constexpr uint32_t kRingChunk = 16384;
constexpr int kMaxStages = 8;
// Dynamic shared memory: 224 KB (sm_90 allows 227 KB per block; ~0.3 KB static below).
// B at hidden 8192 bf16: world 2: 3 stages x 48 KB + 64 KB; world 4: 2 x 80 + 64; world 8: 1 x 144 + 64.
constexpr int kBulkSmem = 224 * 1024;
static_assert(kRingSlots * kRingChunk <= kBulkSmem, "ring fits");

struct BulkShared {
  uint64_t ring_bar[kRingSlots];
  uint64_t red_bar[kMaxStages];
  char* pend_dst[kRingSlots];
  uint32_t pend_bytes[kRingSlots];
  float seg[kBulkWarps];
  uint32_t bad;
};

// Copy ring, used by thread 0 only. nl / ns: chunks loaded / stored so far in this kernel (the
// slot of chunk i is i % kRingSlots, its mbarrier phase (i / kRingSlots) & 1).
struct Ring {
  char* buf;
  BulkShared* sh;
  uint32_t nl, ns;

  __device__ void drain_one() {
    const uint32_t i = ns, s = i % kRingSlots;
    bulk::mbar_wait(&sh->ring_bar[s], (i / kRingSlots) & 1u);
    bulk::store(sh->pend_dst[s], buf + s * kRingChunk, sh->pend_bytes[s]);
    bulk::commit();
    ++ns;
  }
  __device__ void copy(const char* src, char* dst, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += kRingChunk) {
      const uint32_t n = static_cast<uint32_t>(bytes - off < kRingChunk ? bytes - off : kRingChunk);
      if (nl - ns == kRingAhead) drain_one();
      // Chunk nl reuses the slot of chunk nl - kRingSlots: nl - ns <= kRingAhead - 1 here, so
      // all but the newest kRingSlots - kRingAhead store groups done => that chunk's store read it.
      bulk::wait_read<kRingSlots - kRingAhead>();
      const uint32_t s = nl % kRingSlots;
      sh->pend_dst[s] = dst + off;
      sh->pend_bytes[s] = n;
      bulk::mbar_expect_tx(&sh->ring_bar[s], n);
      bulk::load(buf + s * kRingChunk, src + off, n, &sh->ring_bar[s]);
      ++nl;
    }
  }
  // Everything stored and the writes performed; then visible to generic-proxy release.
  __device__ void finish() {
    while (ns < nl) drain_one();
    bulk::wait_all<0>();
    bulk::fence_async_global();
    __threadfence_system();
  }
};

// Phase A (thread 0): this CTA's rows of every peer's segment -> slot `rank` of its staging.
__device__ void push_rows_bulk(const Params& p, int ch, Ring& ring, int64_t row_bytes) {
  const int c = blockIdx.x;
  for (int j = 1; j < p.world; ++j) {
    const int o = (p.rank + j) % p.world;
    const TokenRange seg = segment_of(p, o, ch);
    int64_t k0;
    const int64_t cnt = cta_rows(p, seg.count, c, &k0);
    if (cnt <= 0) continue;
    const char* src = static_cast<const char*>(p.x) + (seg.begin + k0) * row_bytes;
    char* dst = static_cast<char*>(lsa_raw(p, p.stage_off, o)) + (p.rank * p.slot_rows + k0) * row_bytes;
    ring.copy(src, dst, cnt * row_bytes);
  }
  ring.finish();
}

// Phase B for this CTA's rows of its own segment. nb: row jobs run so far in this kernel
// (mbarrier phases), uniform over the CTA.
template <class T>
__device__ void reduce_norm_bulk(const Params& p, int ch, char* smem, BulkShared& sh, uint32_t& nb,
                                 int64_t row_bytes) {
  const TokenRange seg = segment_of(p, p.rank, ch);
  int64_t k0;
  const int64_t cnt = cta_rows(p, seg.count, blockIdx.x, &k0);
  if (cnt <= 0) return;  // uniform
  const int world = p.world, rank = p.rank, vecs = p.vecs, S = p.bulk_stages;
  const int64_t stage_bytes = (world + 1) * row_bytes;
  char* const outb = smem + S * stage_bytes;  // 2 buffers x {residual row, normalized row}
  const char* const stage_local = static_cast<const char*>(lsa_raw(p, p.stage_off, rank));
  const int64_t rstride_bytes = p.residual_stride * static_cast<int64_t>(sizeof(T));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int v_begin = warp * p.seg_len, v_end = min(v_begin + p.seg_len, vecs);
  const uint4* w = static_cast<const uint4*>(p.weight);

  auto issue = [&](int64_t j) {  // thread 0: loads of row job j
    const uint32_t g = nb + static_cast<uint32_t>(j), s = g % S;
    char* st = smem + s * stage_bytes;
    const int64_t k = k0 + j, row = seg.begin + k;
    bulk::mbar_expect_tx(&sh.red_bar[s], static_cast<uint32_t>(stage_bytes));
    for (int q = 0; q < world; ++q) {
      const char* src = q == rank ? static_cast<const char*>(p.x) + row * row_bytes
                                  : stage_local + (q * p.slot_rows + k) * row_bytes;
      bulk::load(st + q * row_bytes, src, static_cast<uint32_t>(row_bytes), &sh.red_bar[s]);
    }
    bulk::load(st + world * row_bytes, static_cast<const char*>(p.residual) + row * rstride_bytes,
               static_cast<uint32_t>(row_bytes), &sh.red_bar[s]);
  };
  if (threadIdx.x == 0)
    for (int64_t j = 0; j < S && j < cnt; ++j) issue(j);

  for (int64_t j = 0; j < cnt; ++j) {
    const uint32_t g = nb + static_cast<uint32_t>(j), s = g % S;
    const uint4* in = reinterpret_cast<const uint4*>(smem + s * stage_bytes);
    const int64_t in_vecs = row_bytes / 16;
    uint4* ores = reinterpret_cast<uint4*>(outb + (j & 1) * 2 * row_bytes);
    uint4* onorm = ores + in_vecs;
    bulk::mbar_wait(&sh.red_bar[s], (g / S) & 1u);
    // Pass 1 (from shared memory): the same float operations as the push kernel.
    float cur = 0.f;
    for (int idx = v_begin + lane; idx < v_end; idx += 32) {
      float acc[8], f[8];
      detail::unpack8<T>(in[idx], acc);
      for (int q = 1; q < world; ++q) {
        detail::unpack8<T>(in[q * in_vecs + idx], f);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += f[i];
      }
      cur += add_residual_round_store<T>(acc, in[world * in_vecs + idx], ores[idx]);
    }
    const float sv = detail::warp_sum(cur);
    if (lane == 0) sh.seg[warp] = sv;
    __syncthreads();  // stage s consumed; segment sums visible
    if (threadIdx.x == 0 && j + S < cnt) issue(j + S);
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kCanonSegs; ++i) total += sh.seg[i];
    const float inv = rsqrtf(total / static_cast<float>(p.hidden) + p.eps);
    // Pass 2: this thread's own rounded values (written above by this thread).
    for (int idx = v_begin + lane; idx < v_end; idx += 32) {
      float f[8], fw[8];
      detail::unpack8<T>(ores[idx], f);
      detail::unpack8<T>(__ldg(w + idx), fw);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = f[i] * inv * fw[i];
      onorm[idx] = detail::pack8<T>(f);
    }
    bulk::fence_async_shared();  // generic smem writes -> visible to the bulk stores
    // Thread 0: job j - 1's stores finished reading the other output buffer, which the next
    // iteration overwrites (and the segment sums are rewritten only after this barrier).
    if (threadIdx.x == 0) bulk::wait_read<0>();
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t row = seg.begin + k0 + j;
      const uint32_t rb = static_cast<uint32_t>(row_bytes);
      bulk::store(static_cast<char*>(p.residual) + row * rstride_bytes, ores, rb);
      if (p.one_shot) {
        bulk::store(static_cast<char*>(p.out) + row * row_bytes, onorm, rb);
      } else {
        for (int i = 1; i <= world; ++i) {  // peers first (rank + 1, ...), own out last
          const int q = (rank + i) % world;
          char* dst = q == rank ? static_cast<char*>(p.out) : static_cast<char*>(lsa_raw(p, p.out_off, q));
          bulk::store(dst + row * row_bytes, onorm, rb);
        }
      }
      bulk::commit();
    }
  }
  nb += static_cast<uint32_t>(cnt);
  if (threadIdx.x == 0) {  // stores performed before the barrier releases them
    bulk::wait_all<0>();
    bulk::fence_async_global();
    __threadfence_system();
  }
}

template <class T>
__global__ void __launch_bounds__(kBulkBlock, 1) fused_allreduce_bulk_kernel(const Params p) {
  extern __shared__ __align__(128) char smem[];
  __shared__ BulkShared sh;
  const int c = blockIdx.x, num_ctas = gridDim.x;
  const int64_t row_bytes = static_cast<int64_t>(p.hidden) * static_cast<int64_t>(sizeof(T));
  if (threadIdx.x == 0) {
    sh.bad = 0;
    write_header(p, c, num_ctas);
    for (int i = 0; i < kRingSlots; ++i) bulk::mbar_init(&sh.ring_bar[i], 1);
    for (int i = 0; i < kMaxStages; ++i) bulk::mbar_init(&sh.red_bar[i], 1);
    bulk::fence_mbar_init();
  }
  __syncthreads();
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), p.dev, ncclTeamLsa(p.dev), p.dev.lsaBarrier,
                                         static_cast<uint32_t>(c));
  Ring ring{smem, &sh, 0u, 0u};
  uint32_t nb = 0, bad = 0;
  for (int ch = 0; ch < p.num_chunks; ++ch) {
    // A. push our rows to their reducers (thread 0 drives the copy ring).
    if (threadIdx.x == 0) push_rows_bulk(p, ch, ring, row_bytes);
    // 2. barrier c; then peers' staging writes are ours to bulk-load.
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    if (threadIdx.x == 0) bulk::fence_async_global();
    // 3. rank agreement.
    if (ch == 0) {
      check_header(p, c, num_ctas, &sh.bad);
      __syncthreads();
      bad = sh.bad;
    }
    // B. reduce + residual + norm (+ all-gather stores in two-shot).
    if (!bad) reduce_norm_bulk<T>(p, ch, smem, sh, nb, row_bytes);
    // 4. barrier c.
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
    if (threadIdx.x == 0) bulk::fence_async_global();
    if (bad) break;
  }
  // C. two-shot copy out of the other owners' rows (thread 0 drives the ring).
  if (!bad && !p.one_shot && !p.out_is_sym && threadIdx.x == 0) {
    const char* src = static_cast<const char*>(lsa_raw(p, p.out_off, p.rank));
    for (int j = 1; j < p.world; ++j) {
      const int o = (p.rank + j) % p.world;
      const TokenRange seg = owned_range(p.tokens, p.world, o);
      int64_t k0;
      const int64_t cnt = cta_rows(p, seg.count, c, &k0);
      if (cnt <= 0) continue;
      const int64_t off = (seg.begin + k0) * row_bytes;
      ring.copy(src + off, static_cast<char*>(p.out) + off, cnt * row_bytes);
    }
    ring.finish();
  }
  // 5.
  if (threadIdx.x == 0) {
    p.state[1 + c] += 1;
    if (bad) atomicOr(&p.state[0], bad);
  }
}

int64_t bulk_smem_bytes(int world, int64_t row_bytes, int stages) {
  return std::max<int64_t>(static_cast<int64_t>(kRingSlots) * kRingChunk,
                           stages * (world + 1) * row_bytes + 4 * row_bytes);
}

// cudaFuncSetAttribute is per device: done once per (dtype, device).
std::atomic<bool> g_attr_set[2][64];

}  // namespace

bool bulk_fits(int world, int64_t row_bytes, int* stages) {
  const int64_t s = (kBulkSmem - 4 * row_bytes) / ((world + 1) * row_bytes);
  *stages = static_cast<int>(std::min<int64_t>(s, kMaxStages));
  return s >= 1 && row_bytes % 16 == 0;
}

void launch_bulk(const Params& p, DType dtype, int num_ctas, cudaStream_t stream) {
  const int64_t row_bytes = static_cast<int64_t>(p.hidden) * static_cast<int64_t>(dtype_size(dtype));
  const int64_t smem = bulk_smem_bytes(p.world, row_bytes, p.bulk_stages);
  int dev = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&dev));
  WEFT_DISPATCH_HALF_TYPES(dtype, "x", [&] {
    auto* k = fused_allreduce_bulk_kernel<scalar_t>;
    const int ti = dtype == DType::kFloat16 ? 0 : 1;
    if (dev < 0 || dev >= 64 || !g_attr_set[ti][dev].load()) {
      WEFT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkSmem));
      if (dev >= 0 && dev < 64) g_attr_set[ti][dev].store(true);
    }
    k<<<num_ctas, kBulkBlock, smem, stream>>>(p);
  });
}

}  // namespace weft::comm_detail
