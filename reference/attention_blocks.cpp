// The attention reference's row engine: blocked over (query row x head) and keys, multi-threaded.
//
// Work split: a task is (request, KV head, block of up to kMaxRows "virtual rows"), a virtual row
// being one (query row i, query head h) of the KV head's GQA group, numbered i * group + g. Every
// output (row, head) belongs to exactly one task, and within a task each element is computed with
// the arithmetic order of the plain per-row loop (attention_detail.h), so neither the thread count
// nor the blocking nor the SIMD width changes any result bit. (No FMA: the reference is compiled
// with -ffp-contract=off and the wide paths enable only avx2 / avx512f, never fma.)
//
// Cache behaviour: K and V are converted to T and gathered one key tile (kKeyTile keys of one KV
// head, [key][d]) at a time; the tile is reused by every row of the task. The task's queries are
// transposed once to [d][row], so a register block of (rows x KB keys) dot products accumulates
// with vector loads along rows and a broadcast K element (no K transpose). Pass 1 stores the scores
// of the task's rows (only keys some row can see: causal / window bounds); pass 2 walks the same
// tiles again for P.V, one d-chunk of the V tile at a time across all rows (L1-resident).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/attention_detail.h"
#include "reference/parallel.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define WEFT_REF_X86 1
#define WEFT_REF_TARGET(isa) __attribute__((target(isa)))
#else
#define WEFT_REF_X86 0
#define WEFT_REF_TARGET(isa)
#endif
#if defined(__GNUC__)
#define WEFT_REF_INLINE inline __attribute__((always_inline))
#else
#define WEFT_REF_INLINE inline
#endif

namespace weft::ref {
namespace {
// Highest SIMD level the engine may use: 0 baseline, 1 AVX2, 2 AVX-512 (test hook, attention.h).
std::atomic<int> g_simd_limit{2};
}  // namespace

void set_reference_simd_limit(int level) { g_simd_limit.store(std::clamp(level, 0, 2)); }

namespace detail {
namespace {

// 64 keys per tile: the K / V tile is 64 x D T (64 KiB at D = 128 in double), small enough to
// stay in L2 while all of a task's rows pass over it; a P.V d-chunk of it (64 x 8 vectors) fits L1.
constexpr int64_t kKeyTile = 64;
// Rows per task at most: 32 rows of scores over 8K keys is 2 MiB of doubles per thread.
constexpr int64_t kMaxRows = 32;

struct Shared {
  const RaggedQ& q;
  const RaggedKV& kv;
  const Options& opt;
  const Dims& dm;
  const Policy& pol;
  const RequestJob* jobs;
};

struct Task {
  int64_t job, hk, v0, v1;
};

// GCC vector extension: element-wise IEEE mul / add, exactly the scalar results lane by lane.
template <class T, int VB>
struct VecOf {
  typedef T type __attribute__((vector_size(VB)));
  static constexpr int kLanes = VB / static_cast<int>(sizeof(T));
};

// Unaligned vector load / store (by reference: a vector return value would trip -Wpsabi).
template <class V, class T>
WEFT_REF_INLINE void load_vec(V& v, const T* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <class V, class T>
WEFT_REF_INLINE void store_vec(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// Dot products of a register block: rows r0 + n * lanes + lane (n < NR) x keys k < KB,
//   acc[n][k][lane] = sum_d qt[d][row] * kt[k][d], each sum in d order starting from 0.
// qt: the task's queries transposed, [D][ldq]; kt: KB keys of the K tile, [key][D].
// Vectorized across rows, so K needs no transposing: K[k][d] is broadcast.
template <class T, int VB, int NR, int KB>
WEFT_REF_INLINE void dot_block(const T* qt, int64_t ldq, const T* kt, int64_t D,
                               typename VecOf<T, VB>::type (&acc)[NR][KB]) {
  using V = typename VecOf<T, VB>::type;
  constexpr int kLanes = VecOf<T, VB>::kLanes;
  for (int n = 0; n < NR; ++n) {
    for (int k = 0; k < KB; ++k) acc[n][k] = V{};
  }
  for (int64_t d = 0; d < D; ++d) {
    V qv[NR];
    for (int n = 0; n < NR; ++n) load_vec(qv[n], qt + d * ldq + n * kLanes);
    for (int k = 0; k < KB; ++k) {
      const T kd = kt[k * D + d];
      for (int n = 0; n < NR; ++n) acc[n][k] += qv[n] * kd;
    }
  }
}

// acc[d] += w[n] * vt[key[n]][d] for n = 0..count-1 in order, d in [d0, d0 + NP * lanes) (vector
// chunk) or [d0, d1) (scalar tail). The NP accumulator vectors stay in registers across the key
// list: enough independent add chains to hide the add latency.
template <class T, int VB, int NP>
WEFT_REF_INLINE void accumulate_chunk(T* acc, int64_t D, int64_t d0, const T* vt, const T* w, const int32_t* key,
                                      int64_t count) {
  using V = typename VecOf<T, VB>::type;
  constexpr int64_t kLanes = VecOf<T, VB>::kLanes;
  V a[NP];
  for (int c = 0; c < NP; ++c) load_vec(a[c], acc + d0 + c * kLanes);
  for (int64_t n = 0; n < count; ++n) {
    const T* vrow = vt + key[n] * D + d0;
    const T wn = w[n];
    for (int c = 0; c < NP; ++c) {
      V v;
      load_vec(v, vrow + c * kLanes);
      a[c] += v * wn;
    }
  }
  for (int c = 0; c < NP; ++c) store_vec(acc + d0 + c * kLanes, a[c]);
}
template <class T>
WEFT_REF_INLINE void accumulate_tail(T* acc, int64_t D, int64_t d0, int64_t d1, const T* vt, const T* w,
                                     const int32_t* key, int64_t count) {
  for (int64_t d = d0; d < d1; ++d) {
    T a = acc[d];
    for (int64_t n = 0; n < count; ++n) a += w[n] * vt[key[n] * D + d];
    acc[d] = a;
  }
}

// One task. T: double (exact) or float (emulation); VB: vector bytes; NR x KB: the dot register
// block (NR vectors of rows x KB keys); NP: P.V accumulator vectors. Every member is always_inline
// so that the whole task is compiled for the ISA of the wrapper calling run() (a separate
// function, e.g. a lambda, would not inherit the wrapper's target).
template <class T, int VB, int NR, int KB, int NP>
struct TaskRunner {
  using V = typename VecOf<T, VB>::type;
  static constexpr int64_t kRowBlock = NR * VecOf<T, VB>::kLanes;

  const Shared& sh;
  const Task& t;
  int64_t b = 0, kb = 0, ke = 0, q0 = 0, q_len = 0, k0 = 0, kv_len = 0, D = 0, R = 0, Rp = 0;
  int64_t jlo = 0, jhi = 0, n_keys = 0;
  T scale = 0, cap = 0;
  bool softcap = false, alibi = false;
  // Rows: query row i, head h, position p, keys [lo, hi) not excluded by causal / window.
  std::vector<int64_t> ri, rh, rp, lo, hi, cnt;
  std::vector<T> slope, qt, S, m, tile;
  std::vector<uint8_t> vis;

  WEFT_REF_INLINE TaskRunner(const Shared& s, const Task& task) : sh(s), t(task) {}

  WEFT_REF_INLINE void setup() {
    const RaggedQ& q = sh.q;
    const Options& opt = sh.opt;
    const Dims& dm = sh.dm;
    const RequestJob& job = sh.jobs[t.job];
    b = job.b;
    kb = job.kv_begin;
    ke = job.kv_end;
    q0 = q.qo_indptr[b];
    q_len = q.qo_indptr[b + 1] - q0;
    k0 = sh.kv.kv_indptr[b];
    kv_len = sh.kv.kv_indptr[b + 1] - k0;
    D = dm.d;
    R = t.v1 - t.v0;
    Rp = (R + kRowBlock - 1) / kRowBlock * kRowBlock;  // padding rows are zero; their dots unused
    scale = static_cast<T>(dm.scale);
    cap = static_cast<T>(opt.logits_soft_cap);
    softcap = opt.logits_soft_cap > 0;
    alibi = !opt.alibi_slopes.empty();
    ri.resize(R);
    rh.resize(R);
    rp.resize(R);
    lo.resize(R);
    hi.resize(R);
    slope.assign(R, T(0));
    jlo = ke;
    jhi = kb;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t vr = t.v0 + r;
      ri[r] = vr / dm.group;
      rh[r] = t.hk * dm.group + vr % dm.group;
      rp[r] = kv_len - q_len + ri[r];
      if (alibi) slope[r] = static_cast<T>(opt.alibi_slopes[rh[r]]);
      lo[r] = kb;
      hi[r] = ke;
      if (opt.causal) hi[r] = std::min(hi[r], rp[r] + 1);
      if (opt.window_left >= 0) lo[r] = std::max(lo[r], rp[r] - opt.window_left);
      if (hi[r] <= lo[r]) {
        hi[r] = lo[r] = kb;  // sees nothing
        continue;
      }
      jlo = std::min(jlo, lo[r]);
      jhi = std::max(jhi, hi[r]);
    }
    n_keys = std::max<int64_t>(jhi - jlo, 0);
    qt.assign(D * Rp, T(0));
    for (int64_t r = 0; r < R; ++r) {
      const float* qrow = q.data + ((q0 + ri[r]) * dm.hq + rh[r]) * D;
      for (int64_t d = 0; d < D; ++d) qt[d * Rp + r] = static_cast<T>(qrow[d]);
    }
    S.resize(R * n_keys);
    vis.assign(R * n_keys, 0);
    m.assign(R, -std::numeric_limits<T>::infinity());
    cnt.assign(R, 0);
    // K tile as [key][d] (plus KB zero keys of padding); later the V tile, same layout.
    tile.assign((kKeyTile + KB) * D, T(0));
  }

  // Scores of rows [r0, r0 + kRowBlock) x keys [t0 + j0, t0 + j0 + KB) of the K tile at t0.
  WEFT_REF_INLINE void score_block(int64_t r0, int64_t j0, int64_t t0, int64_t nt) {
    const int64_t ka = t0 + j0, kz = std::min(t0 + j0 + KB, t0 + nt);
    const int64_t r_end = std::min<int64_t>(r0 + kRowBlock, R);
    bool any = false;
    for (int64_t r = r0; r < r_end; ++r) any = any || (lo[r] < kz && hi[r] > ka);
    if (!any) return;
    V acc[NR][KB];
    dot_block<T, VB, NR, KB>(qt.data() + r0, Rp, tile.data() + j0 * D, D, acc);
    T dots[KB][kRowBlock];  // [key][row]
    for (int k = 0; k < KB; ++k) {
      for (int n = 0; n < NR; ++n) store_vec(dots[k] + n * VecOf<T, VB>::kLanes, acc[n][k]);
    }
    for (int64_t r = r0; r < r_end; ++r) {
      for (int64_t j = std::max(ka, lo[r]); j < std::min(kz, hi[r]); ++j) {
        if (!visible(sh.opt, b, ri[r], j, rp[r], kv_len)) continue;
        T x = scale * dots[j - ka][r - r0];
        if (softcap) x = cap * std::tanh(x / cap);
        if (alibi) x += slope[r] * static_cast<T>(j - rp[r]);
        S[r * n_keys + (j - jlo)] = x;
        vis[r * n_keys + (j - jlo)] = 1;
        ++cnt[r];
        if (x > m[r]) m[r] = x;
      }
    }
  }

  // Converts keys [t0, t0 + nt) of the KV head (K or V) into the tile, [key][d].
  WEFT_REF_INLINE void load_tile(const float* src, int64_t t0, int64_t nt) {
    const int64_t hkv = sh.dm.hkv;
    for (int64_t jj = 0; jj < nt; ++jj) {
      const float* row = src + ((k0 + t0 + jj) * hkv + t.hk) * D;
      T* dst = tile.data() + jj * D;
      for (int64_t d = 0; d < D; ++d) dst[d] = static_cast<T>(row[d]);
    }
  }

  // Pass 1: scores (T) of visible keys and the running max, in key order per row.
  WEFT_REF_INLINE void scores() {
    for (int64_t t0 = jlo; t0 < jhi; t0 += kKeyTile) {
      const int64_t nt = std::min(kKeyTile, jhi - t0);
      load_tile(sh.kv.k, t0, nt);
      std::fill(tile.begin() + nt * D, tile.end(), T(0));  // padding keys of the last block
      for (int64_t r0 = 0; r0 < R; r0 += kRowBlock) {
        for (int64_t j0 = 0; j0 < nt; j0 += KB) score_block(r0, j0, t0, nt);
      }
    }
  }

  // Pass 2: P.V over the same tiles, visible keys in key order per row; then O and LSE. Per tile:
  // every row's probabilities first, then d-chunk by d-chunk over all rows, so that the chunk of
  // the V tile (kKeyTile x chunk) stays in L1 while the rows pass over it.
  WEFT_REF_INLINE void finish() {
    const Dims& dm = sh.dm;
    constexpr int64_t kChunk = NP * VecOf<T, VB>::kLanes;
    std::vector<T> acc(R * D, T(0)), l(R, T(0)), w(R * kKeyTile);
    std::vector<int32_t> key(R * kKeyTile);
    std::vector<int64_t> count(R);
    for (int64_t t0 = jlo; t0 < jhi; t0 += kKeyTile) {
      const int64_t nt = std::min(kKeyTile, jhi - t0);
      load_tile(sh.kv.v, t0, nt);
      for (int64_t r = 0; r < R; ++r) {
        int64_t n = 0;
        const int64_t base = r * n_keys + (t0 - jlo);
        for (int64_t jj = 0; cnt[r] > 0 && jj < nt; ++jj) {
          if (!vis[base + jj]) continue;
          const T e = std::exp(S[base + jj] - m[r]);
          l[r] += e;  // the row sum uses the unrounded probability (as the kernels do)
          w[r * kKeyTile + n] = static_cast<T>(round_value(sh.pol.p_round, e));
          key[r * kKeyTile + n++] = static_cast<int32_t>(jj);
        }
        count[r] = n;
      }
      int64_t d0 = 0;
      for (; d0 + kChunk <= D; d0 += kChunk) {
        for (int64_t r = 0; r < R; ++r) {
          if (count[r] == 0) continue;
          accumulate_chunk<T, VB, NP>(acc.data() + r * D, D, d0, tile.data(), w.data() + r * kKeyTile,
                                      key.data() + r * kKeyTile, count[r]);
        }
      }
      for (int64_t r = 0; r < R && d0 < D; ++r) {
        accumulate_tail(acc.data() + r * D, D, d0, D, tile.data(), w.data() + r * kKeyTile, key.data() + r * kKeyTile,
                        count[r]);
      }
    }
    const RequestJob& job = sh.jobs[t.job];
    for (int64_t r = 0; r < R; ++r) {
      double* o = job.o + (ri[r] * dm.hq + rh[r]) * D;
      double* lse = job.lse + ri[r] * dm.hq + rh[r];
      if (cnt[r] == 0) {
        for (int64_t d = 0; d < D; ++d) o[d] = 0;
        *lse = -std::numeric_limits<double>::infinity();
        continue;
      }
      for (int64_t d = 0; d < D; ++d) o[d] = round_value(sh.pol.o_round, static_cast<double>(acc[r * D + d] / l[r]));
      *lse = static_cast<double>(m[r] + std::log(l[r]));
    }
  }

  WEFT_REF_INLINE void run() {
    setup();
    scores();
    finish();
  }
};

template <class T, int VB, int NR, int KB, int NP>
WEFT_REF_INLINE void task_body(const Shared& sh, const Task& t) {
  TaskRunner<T, VB, NR, KB, NP> runner(sh, t);
  runner.run();
}

// Instantiations per ISA (vector width = the ISA's register: wider generic vectors are lowered
// poorly). Register budget: 16 vector registers for SSE2 and AVX2, 32 for AVX-512; the dot block
// holds NR * KB accumulators + NR query vectors + a broadcast, P.V holds NP accumulators + a load;
// >= 8 independent accumulators hide the 4-cycle add latency on two FP ports.
void task_base_d(const Shared& s, const Task& t) { task_body<double, 16, 1, 8, 8>(s, t); }
void task_base_f(const Shared& s, const Task& t) { task_body<float, 16, 1, 8, 8>(s, t); }
#if WEFT_REF_X86
WEFT_REF_TARGET("avx2") void task_avx2_d(const Shared& s, const Task& t) { task_body<double, 32, 1, 8, 8>(s, t); }
WEFT_REF_TARGET("avx2") void task_avx2_f(const Shared& s, const Task& t) { task_body<float, 32, 1, 8, 8>(s, t); }
WEFT_REF_TARGET("avx512f") void task_avx512_d(const Shared& s, const Task& t) { task_body<double, 64, 2, 8, 8>(s, t); }
WEFT_REF_TARGET("avx512f") void task_avx512_f(const Shared& s, const Task& t) { task_body<float, 64, 1, 12, 8>(s, t); }
#endif

using TaskFn = void (*)(const Shared&, const Task&);

TaskFn pick(bool low) {
#if WEFT_REF_X86
  const int limit = g_simd_limit.load();
  __builtin_cpu_init();
  if (limit >= 2 && __builtin_cpu_supports("avx512f")) return low ? task_avx512_f : task_avx512_d;
  if (limit >= 1 && __builtin_cpu_supports("avx2")) return low ? task_avx2_f : task_avx2_d;
#endif
  return low ? task_base_f : task_base_d;
}

}  // namespace

void run_jobs(const RaggedQ& q, const RaggedKV& kv, const Options& opt, const Dims& dm, const Policy& pol,
              const RequestJob* jobs, int64_t n_jobs) {
  // Rows per task: kMaxRows, fewer (down to 16, a whole register block of rows on every path)
  // when that would leave under ~4 tasks per thread. The split never changes a result bit.
  int64_t total_rows = 0;
  for (int64_t n = 0; n < n_jobs; ++n) total_rows += (q.qo_indptr[jobs[n].b + 1] - q.qo_indptr[jobs[n].b]) * dm.hq;
  const int64_t want_tasks = 4 * static_cast<int64_t>(num_threads());
  const int64_t even = (total_rows + want_tasks - 1) / want_tasks;
  const int64_t rows_per_task = std::min(kMaxRows, std::max<int64_t>(16, (even + 15) / 16 * 16));

  std::vector<Task> tasks;
  for (int64_t n = 0; n < n_jobs; ++n) {
    const int64_t b = jobs[n].b;
    const int64_t vrows = (q.qo_indptr[b + 1] - q.qo_indptr[b]) * dm.group;
    for (int64_t hk = 0; hk < dm.hkv; ++hk) {
      for (int64_t v0 = 0; v0 < vrows; v0 += rows_per_task) tasks.push_back({n, hk, v0, std::min(vrows, v0 + rows_per_task)});
    }
  }
  const Shared sh{q, kv, opt, dm, pol, jobs};
  const TaskFn fn = pick(pol.low);
  parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t i) { fn(sh, tasks[i]); });
}

}  // namespace detail
}  // namespace weft::ref
