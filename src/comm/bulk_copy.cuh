// Internal (device, sm_90+): thin wrappers over the PTX bulk-copy (TMA, non-tensor) and
// mbarrier instructions, used by weft-nvlink-probe's bulk copy rings (the bulk fused all-reduce
// kernel that also used them was removed with issue 26: no selector picked it). PTX ISA 8.0:
//   cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [smem], [gmem], size, [mbar]
//   cp.async.bulk.global.shared::cta.bulk_group [gmem], [smem], size
//   cp.async.bulk.commit_group / cp.async.bulk.wait_group{.read} N
// Sizes are multiples of 16 bytes, addresses 16-byte aligned. Global operands are generic
// addresses of global memory: local buffers and peers' buffers mapped over NVLink (LSA pointers
// from ncclGetLsaPointer, which are plain device virtual addresses of the symmetric window).
// Proxy rules: TMA accesses belong to the async proxy. Shared memory written by threads and then
// read by a bulk store needs fence.proxy.async.shared::cta (+ barrier) before the store is
// issued; global memory handed between the generic proxy (flags, barriers, plain loads/stores)
// and bulk copies gets fence.proxy.async.global on both sides.
#pragma once
#include <cstdint>

namespace weft::comm_detail::bulk {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes mbarrier initializations visible to the async proxy (and to the other threads after a
// __syncthreads).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// global -> shared, completes `bytes` of transaction count on `bar`.
__device__ __forceinline__ void load(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// shared -> global (bulk async-group completion).
__device__ __forceinline__ void store(void* gmem_dst, const void* smem_src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem_dst),
               "r"(smem_addr(smem_src)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// At most N of the most recent groups still reading their shared-memory source.
template <int N>
__device__ __forceinline__ void wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// At most N of the most recent groups not complete (writes performed).
template <int N>
__device__ __forceinline__ void wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void fence_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

}  // namespace weft::comm_detail::bulk
