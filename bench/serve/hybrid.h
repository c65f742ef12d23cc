// weft-serve-sim's hybrid family (serve/trace.h make_hybrid_trace): chunked prefill + decodes of a
// step through weft::BatchPODAttention, one option per PodMode (hybrid.cu). Built when the pod
// component is (WEFT_SERVE_POD); without it, --families hybrid reports an error.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace weft::serve {

struct HybridOptionStats {
  std::vector<double> wall, gpu, plan;  // per step: medians of the repeats, us
};
struct HybridCheck {
  double max_o_err = 0, max_lse_err = 0;
  bool ok = true;
};
struct HybridResult {
  int32_t steps = 0, max_active = 0;
  // "serial", "fused", "partition" (PodMode pinned, the planner's own k) and "router" (kAuto).
  std::map<std::string, HybridOptionStats> routes;
  std::map<std::string, int> picks;  // what kAuto ran per step: serial, fused, partition/k<free SMs>
  std::map<std::string, int> partition_k;  // the pinned partition option's k per step: k<free SMs>
  std::map<std::string, HybridCheck> checks;  // per option, over the first and the last step
  // Per step: prefill requests, prefill query tokens, decode requests, decode keys.
  std::vector<std::vector<int64_t>> step_shape;
};

// Runs the family on `stream` (seed, steps, repeats interleaved in a shuffled order per step);
// flush_l2 is called before every execution, outside the timed region.
HybridResult run_hybrid(cudaStream_t stream, const std::function<void()>& flush_l2, uint64_t seed, int32_t steps,
                        int32_t reps, bool check);

}  // namespace weft::serve
