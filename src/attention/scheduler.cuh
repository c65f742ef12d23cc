// Device schedulers: how a CTA of a persistent attention kernel finds its work. Three
// interchangeable policies behind one small interface, so a kernel body written against "run the
// work items / item list c of the plan" (prefill_item_range, decode_items) does not care which one
// assigned c:
//
//   static               c = blockIdx.x: the plan's deal IS the schedule (what the decode and
//                        prefill kernels do). No atomics, no counters.
//   QueueScheduler       an atomic work queue: each call to next() returns the next unclaimed index
//                        of a list (items or plan CTAs) until it is exhausted; CTAs that finish
//                        early take more. One counter.
//   SM-aware binding     first_op() + claim() (POD-Attention Fig. 9): the CTAs of a fused kernel share the work of two
//                        ops (0: prefill, 1: decode), each a list of n_op "virtual CTAs" (units
//                        of work: one prefill work item, one dealt decode item list). A CTA first
//                        picks its op per SM (first_op): it reads %smid, takes a ticket from that SM's
//                        counter and binds to op 0 when ticket % (r0 + r1) < r0, so every SM
//                        receives both kinds of CTA in the plan's ratio r0 : r1 whatever order the
//                        hardware dispatches CTAs in. It then claims virtual CTAs of that op from
//                        the op's counter (claim), one after another, and when the op has none left it
//                        switches over to the other op: a slot whose side ran out of work takes
//                        the other side's remaining work, so neither side's tail leaves SMs half
//                        idle. A CTA exits when both ops are exhausted, so every virtual CTA is
//                        claimed exactly once (each claim is one atomic increment; an id below
//                        n_op goes to exactly one claimer).
//                        Policy kStatic (the "no SM binding" ablation): the first op is chosen
//                        by CTA index (CTAs below first0 start with op 0), no %smid, no tickets.
// Counters live in the caller's workspace (fixed offset, zero before the first launch: plan()
// copies zeros there) and are reset INSIDE the launch: every CTA counts itself done after its
// work; the last one (done == grid - 1) sets every counter back to 0, so the next launch (a CUDA
// graph replay, after any re-plan) starts from zero with no host call in between.
// Memory order: tickets and claims need no ordering (they only split work: the plan arrays the
// claimed work reads were written before the launch). The done count is acq_rel so the last CTA
// sees every other CTA's claims before it resets; the reset itself is ordered before the next
// launch by the kernel boundary.
// The plan-side types (BindPlan, Counters) are host-includable; the device policies compile only
// under nvcc.
#pragma once
#include <cstdint>
#ifdef __CUDACC__
#include <cuda/atomic>
#endif

namespace weft::attn::sched {

// SMs a per-SM ticket array covers (H100 132, H200 132, B200 148): checked at construction.
inline constexpr int kMaxSms = 256;

enum class BindPolicy : int32_t {
  kStatic = 0,   // CTA index decides (no %smid): prefill CTAs first, then decode CTAs
  kSmAware = 1,  // %smid + per-SM ticket, ratio r0 : r1 (1 : 1 is the 50:50 policy)
};

// What a fused launch binds against (plan time, copied into the workspace: read at run time, so a
// captured graph follows every re-plan).
struct BindPlan {
  int32_t n[2];      // virtual CTAs of op 0 and op 1 (any grid size claims them all)
  int32_t ratio[2];  // per-SM ticket ratio r0 : r1 of the first op (kSmAware)
  int32_t policy;    // BindPolicy
  int32_t num_sms;   // SMs of the device (information: tests, benches)
  int32_t first0;    // kStatic: CTAs blockIdx.x < first0 start with op 0
  int32_t reserved;
};

struct Counters {
  uint32_t claimed[2];  // virtual CTAs claimed per op
  uint32_t done;        // CTAs finished this launch
  uint32_t reserved;
  uint32_t sm_ticket[kMaxSms];
};

#ifdef __CUDACC__
// Thread 0 only; the caller broadcasts the result (shared memory) when the CTA needs it.
struct QueueScheduler {
  uint32_t* head;
  int32_t size;
  __device__ __forceinline__ int next() const {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> h(*head);
    // A relaxed load first: once the queue is exhausted, late callers stop incrementing it.
    if (h.load(cuda::memory_order_relaxed) >= uint32_t(size)) return -1;
    const uint32_t i = h.fetch_add(1u, cuda::memory_order_relaxed);
    return i < uint32_t(size) ? static_cast<int>(i) : -1;
  }
};

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Thread 0 only (the caller broadcasts): the op this CTA starts with.
__device__ __forceinline__ int first_op(const BindPlan& bp, Counters* c) {
  if (bp.policy == static_cast<int32_t>(BindPolicy::kStatic)) return static_cast<int>(blockIdx.x) < bp.first0 ? 0 : 1;
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device> ticket(c->sm_ticket[sm_id() % kMaxSms]);
  const uint32_t t = ticket.fetch_add(1u, cuda::memory_order_relaxed);
  return t % uint32_t(bp.ratio[0] + bp.ratio[1]) < uint32_t(bp.ratio[0]) ? 0 : 1;
}

// Thread 0 only: the next unclaimed virtual CTA of `op`, or -1 when the op is exhausted. A CTA
// claims from its first op until -1, then from the other op until -1, then is done.
__device__ __forceinline__ int claim(const BindPlan& bp, Counters* c, int op) {
  return QueueScheduler{&c->claimed[op], bp.n[op]}.next();  // each op's units are an atomic queue
}

// Whole CTA, after its work. The last CTA of the launch resets every counter.
__device__ __forceinline__ void finish(Counters* c) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  cuda::atomic_ref<uint32_t, cuda::thread_scope_device> done(c->done);
  if (done.fetch_add(1u, cuda::memory_order_acq_rel) + 1u != gridDim.x) return;
  c->claimed[0] = 0;
  c->claimed[1] = 0;
  // Every slot (not just num_sms): %smid may be sparse on some parts (it is < %nsmid, not < the
  // SM count); 256 stores by one thread once per launch.
  for (int s = 0; s < kMaxSms; ++s) c->sm_ticket[s] = 0;
  done.store(0u, cuda::memory_order_relaxed);
}

#endif  // __CUDACC__

}  // namespace weft::attn::sched
