// Bench group "norm": rmsnorm and fused_add_rmsnorm, bf16, hidden 8192 (Llama-70B-like),
// tokens 1K / 4K / 16K. Bytes = every input row read once + every output row written once
// (rmsnorm: x read, out written; fused: x and residual read, both written; the 16 KB weight is
// counted once); ceiling "copy" (cudaMemcpyAsync D2D, read + written). Target: >= 85% of the
// copy ceiling at >= 4K tokens. L2 flushed before every timed run (harness).
#include <string>

#include "harness.h"
#include "weft/norm.h"

namespace {

using weft::bench::DeviceArray;

void run_norm_case(weft::bench::Context& ctx, int64_t tokens, int64_t hidden, bool fused) {
  const weft::DType dt = weft::DType::kBFloat16;
  weft::bench::Result r;
  r.name = std::string("norm/") + (fused ? "fused_add_rmsnorm" : "rmsnorm") + "/t" + std::to_string(tokens) + "/h" +
           std::to_string(hidden);
  if (!ctx.wants(r.name)) return;
  r.params = {{"tokens", std::to_string(tokens)}, {"hidden", std::to_string(hidden)}, {"dtype", "bf16"}};
  const std::size_t n = static_cast<std::size_t>(tokens * hidden);
  DeviceArray x(n * 2), res(n * 2), w(hidden * 2), out(n * 2);
  weft::bench::fill_random(x.get(), n, dt, 1);
  weft::bench::fill_random(res.get(), n, dt, 2);
  weft::bench::fill_random(w.get(), hidden, dt, 3, 0.5f, 1.5f);
  weft::TensorView tx(x.get(), dt, {tokens, hidden}), tres(res.get(), dt, {tokens, hidden}),
      tw(w.get(), dt, {hidden}), tout(out.get(), dt, {tokens, hidden});
  try {
    if (fused) {
      // In place on x and residual: repeated runs keep the magnitudes bounded enough for timing
      // (values change, work does not).
      r.ms = ctx.time_ms([&](cudaStream_t s) { weft::fused_add_rmsnorm(tx, tres, tw, 1e-6, s); });
      r.bytes = 4.0 * n * 2 + hidden * 2;
    } else {
      r.ms = ctx.time_ms([&](cudaStream_t s) { weft::rmsnorm(tx, tw, tout, 1e-6, s); });
      r.bytes = 2.0 * n * 2 + hidden * 2;
    }
  } catch (const std::exception& e) {
    ctx.report_error(r, e.what());
    return;
  }
  r.ceiling = "copy";
  ctx.report(r);
}

}  // namespace

WEFT_BENCH_GROUP(norm) {
  for (bool fused : {false, true})
    for (int64_t tokens : {1024, 4096, 16384}) run_norm_case(ctx, tokens, 8192, fused);
}
