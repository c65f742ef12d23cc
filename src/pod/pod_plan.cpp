#include "pod/pod_plan.h"

#include <algorithm>
#include <cmath>

#include "attention/heuristics.h"
#include "weft/error.h"

namespace weft::pod {

namespace {

void check_input(const PlanInput& in) {
  WEFT_CHECK_ARG(in.pre_qo_len.size() == in.pre_kv_len.size(), "pre_kv_len",
                 "has " << in.pre_kv_len.size() << " entries, pre_qo_len " << in.pre_qo_len.size());
  for (std::size_t b = 0; b < in.pre_qo_len.size(); ++b)
    WEFT_CHECK_ARG(in.pre_qo_len[b] >= 0 && in.pre_qo_len[b] <= in.pre_kv_len[b], "pre_qo_len",
                   "request " << b << ": q_len " << in.pre_qo_len[b] << " must be in [0, kv_len "
                              << in.pre_kv_len[b] << "]");
  for (std::size_t b = 0; b < in.dec_kv_len.size(); ++b)
    WEFT_CHECK_ARG(in.dec_kv_len[b] >= 0, "dec_kv_len", "entry " << b << " is negative");
  WEFT_CHECK_ARG(in.num_qo_heads > 0 && in.num_kv_heads > 0 && in.num_qo_heads % in.num_kv_heads == 0,
                 "num_kv_heads", "heads " << in.num_qo_heads << " / " << in.num_kv_heads);
  WEFT_CHECK_ARG(in.head_dim > 0, "head_dim", "must be > 0");
  WEFT_CHECK_ARG(in.num_sms > 0 && in.ctas_per_sm > 0, "num_sms", "SMs and CTAs per SM must be > 0");
}

double us(double work, double rate_per_us) { return work > 0 ? work / rate_per_us : 0.0; }

}  // namespace

double prefill_flops(const PlanInput& in) {
  double pairs = 0;
  for (std::size_t b = 0; b < in.pre_qo_len.size(); ++b) {
    const double q = in.pre_qo_len[b], kv = in.pre_kv_len[b];
    pairs += in.causal ? q * (kv - q) + q * (q + 1) / 2 : q * kv;
  }
  return 4.0 * in.head_dim * in.num_qo_heads * pairs;
}

double decode_bytes(const PlanInput& in) {
  double keys = 0;
  for (int32_t kv : in.dec_kv_len) keys += kv;
  return 2.0 * in.head_dim * in.num_kv_heads * 2.0 * keys;
}

namespace {
// Each side alone (us): the FA2 prefill (the fused kernel's prefill body) and the decode kernel.
double fa2_alone_us(const PlanInput& in, const heuristics::PodCost& c) {
  const double wp = prefill_flops(in);
  return wp > 0 ? us(wp, c.fa2_tflops * 1e6) + c.fa2_us : 0.0;
}
double decode_alone_us(const PlanInput& in, const heuristics::PodCost& c) {
  const double wd = decode_bytes(in);
  return wd > 0 ? us(wd, c.decode_gbps * 1e3) + c.decode_us : 0.0;
}
}  // namespace

double fused_time_us(const PlanInput& in) {
  const heuristics::PodCost& c = heuristics::pod_cost();
  const double p = fa2_alone_us(in, c), d = decode_alone_us(in, c);
  return std::max(p, d) + c.overlap * std::min(p, d) + c.fused_us;
}

int32_t max_partition_candidate(int32_t num_sms) {
  const heuristics::PodCost& c = heuristics::pod_cost();
  return std::min(c.partition_max_free, num_sms / 2) / c.partition_step * c.partition_step;
}

bool is_partition_candidate(int32_t k, int32_t num_sms) {
  return k > 0 && k % heuristics::pod_cost().partition_step == 0 && k <= max_partition_candidate(num_sms);
}

std::vector<int32_t> partition_candidates(int32_t num_sms) {
  const int32_t step = heuristics::pod_cost().partition_step;
  std::vector<int32_t> v;
  for (int32_t k = step; k <= max_partition_candidate(num_sms); k += step) v.push_back(k);
  return v;
}

double partition_time_us(const PlanInput& in, int32_t k) {
  const heuristics::PodCost& c = heuristics::pod_cost();
  const double wp = prefill_flops(in), wd = decode_bytes(in);
  const int32_t n = in.num_sms, p = n - k;
  const double rd = c.decode_gbps * 1e3;                                           // bytes per us
  const double rk = std::min(rd, double(k) * c.decode_gbps_per_sm * 1e3);
  const double tp = wp > 0 ? c.partition_prefill_slowdown * wp / (c.sm90_tflops * 1e6) * n / p + c.sm90_us : 0.0;
  if (wd <= 0) return tp + c.partition_us;
  // Decode reads on the k free SMs while the prefill runs (after its own start-up), then what is
  // left of it on every SM.
  const double left = wd - rk * std::max(0.0, tp - c.decode_us);
  if (left <= 0) return tp + c.partition_us;  // decode ended first: hidden
  return std::max(tp, c.decode_us) + left / rd + c.partition_us;
}

int64_t sm90_tiles(const PlanInput& in) {
  const int64_t group = in.num_qo_heads / in.num_kv_heads;
  int64_t t = 0;
  for (int32_t q : in.pre_qo_len) t += (int64_t(q) * group + 127) / 128;
  return t * in.num_kv_heads;
}

double partition_ratio(const PlanInput& in) {
  const heuristics::PodCost& c = heuristics::pod_cost();
  const double wp = prefill_flops(in);
  if (wp <= 0) return 0.0;
  return decode_alone_us(in, c) / (us(wp, c.sm90_tflops * 1e6) + c.sm90_us);
}

Decision decide(const PlanInput& in) {
  check_input(in);
  const int32_t k_max = max_partition_candidate(in.num_sms);
  WEFT_CHECK_ARG(in.partition_free_sms == 0 || is_partition_candidate(in.partition_free_sms, in.num_sms),
                 "partition_free_sms",
                 in.partition_free_sms << " is not one of the candidates (multiples of "
                                       << heuristics::pod_cost().partition_step << " up to " << k_max << ")");
  const heuristics::PodCost& c = heuristics::pod_cost();
  Decision d;
  const int32_t G = in.num_sms * in.ctas_per_sm;
  d.grid = G;
  const double wp = prefill_flops(in), wd = decode_bytes(in);
  d.t_prefill_us = wp > 0 ? (in.sm90_prefill ? us(wp, c.sm90_tflops * 1e6) + c.sm90_us
                                             : us(wp, c.fa2_tflops * 1e6) + c.fa2_us)
                          : 0.0;
  d.t_decode_us = decode_alone_us(in, c);
  d.t_serial_us = d.t_prefill_us + d.t_decode_us;
  d.t_fused_us = fused_time_us(in);
  d.n_prefill = std::max(0, in.prefill_items);
  d.n_decode = decode_lists(G);
  const int32_t S = in.ctas_per_sm;
  d.ratio_prefill = d.ratio_decode = 1;
  const double p_fa2 = fa2_alone_us(in, c);
  if (in.binding == Binding::kProportional && S >= 2 && wp > 0 && wd > 0) {
    const double p1 = p_fa2, d1 = d.t_decode_us;
    const int32_t k = static_cast<int32_t>(std::lround(S * p1 / (p1 + d1)));
    d.ratio_prefill = std::max(1, std::min(S - 1, k));
    d.ratio_decode = S - d.ratio_prefill;
  }
  d.first0 = static_cast<int32_t>(int64_t(G) * d.ratio_prefill / (d.ratio_prefill + d.ratio_decode));

  // SM partition: the pinned k, or the measured bands' (heuristics::pod_partition_free_sms, the
  // largest candidate not above it on a small GPU).
  const double x = partition_ratio(in);
  const double tiles_per_sm = double(sm90_tiles(in)) / in.num_sms;
  int32_t k_best = in.partition_free_sms;
  if (k_best == 0 && k_max > 0) {  // the largest candidate not above the bands' k, at least the smallest
    const int32_t want = heuristics::pod_partition_free_sms(x, tiles_per_sm, in.tensor_core_decode);
    const int32_t step = c.partition_step;
    k_best = std::max(step, std::min(k_max, std::max(0, want)) / step * step);
  }
  d.free_sms = k_best;
  d.prefill_grid = in.num_sms - k_best;
  // The bands' decode CTA shape goes with the bands' k only: a pinned k keeps the default shape
  // (a graph captured around a pinned partition replays across mixes: one decode kernel).
  d.deep_decode = in.partition_free_sms == 0 &&
                  heuristics::pod_partition_deep_decode(x, tiles_per_sm, in.tensor_core_decode);
  d.t_partition_us = in.sm90_prefill && k_best > 0 ? partition_time_us(in, k_best) : 0.0;

  switch (in.mode) {
    case Mode::kSerial: d.fused = false; break;
    case Mode::kPartition:
      WEFT_CHECK_ARG(k_best > 0, "num_sms", in.num_sms << " SMs leave no partition candidate");
      d.partition = true;
      break;
    case Mode::kFused:
      WEFT_CHECK_ARG(in.fused_supported, "mode", "PodMode::kFused: no fused kernel for this batch "
                                                 "(head_dim 64/128, GQA group <= 8, no ALiBi)");
      d.fused = true;
      break;
    case Mode::kAuto:
      // The measured region (heuristics::pod_cost): few prefill items (one per SM next to a
      // decode CTA) and a decode side that hides the fused kernel's slower prefill.
      d.fused = in.fused_supported && wp > 0 && wd > 0 &&
                int64_t(in.prefill_items) <= int64_t(c.max_items_per_sm) * in.num_sms &&
                d.t_decode_us >= c.min_decode_over_prefill * p_fa2 &&
                d.t_fused_us < d.t_serial_us * (1.0 - c.min_gain);
      // The partition in its measured bands (heuristics::pod_partition_pays; there it measured
      // above the fused kernel too, except in the bands marked fused: heuristics::pod_band_fuses):
      // it needs the sm90 prefill (one CTA per SM) and both sides.
      if (in.sm90_prefill && k_best > 0 && wp > 0 && wd > 0 &&
          heuristics::pod_partition_pays(x, tiles_per_sm, in.tensor_core_decode)) {
        d.fused = in.fused_supported && heuristics::pod_band_fuses(x, tiles_per_sm, in.tensor_core_decode);
        d.partition = !d.fused;
      }
      break;
  }
  return d;
}

}  // namespace weft::pod
