// Serving traces (trace.h).
#include "serve/trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace weft::serve {

const std::vector<std::string>& family_names() {
  static const std::vector<std::string> n{"bucketed_b1", "bucketed", "homogeneous", "bimodal",
                                          "uniform",     "zipf",     "shared",      "b256"};
  return n;
}

namespace {

struct FamilySpec {
  int32_t max_active;
  int32_t shared_prefix;  // keys of the shared system prompt (multiple of the page size), 0: none
};

FamilySpec spec_of(const std::string& f) {
  if (f == "bucketed_b1") return {1, 0};
  if (f == "bucketed") return {4, 0};
  if (f == "homogeneous" || f == "bimodal" || f == "uniform" || f == "zipf") return {8, 0};
  if (f == "shared") return {32, 4096};
  if (f == "b256") return {256, 0};
  throw std::invalid_argument("unknown trace family " + f);
}

// Pages: the reserved length (prompt + decode) of every request; the shared prefix's pages are
// allocated once and listed first by every sharer.
void assign_pages(Trace& t, int32_t shared_pages, double hole, std::mt19937_64& rng) {
  const int32_t page_size = t.page_size;
  int64_t logical = shared_pages;
  std::vector<int32_t> own(t.requests.size());
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const Request& r = t.requests[i];
    const int32_t pages = (r.prompt + r.decode + page_size - 1) / page_size;
    own[i] = pages - r.shared_pages;
    logical += own[i];
    t.max_blocks = std::max(t.max_blocks, pages);
  }
  t.num_pages = static_cast<int64_t>(std::ceil(double(logical) / (1.0 - hole)));
  std::vector<int32_t> perm(size_t(t.num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  int64_t next = 0;
  const std::vector<int32_t> shared(perm.begin(), perm.begin() + shared_pages);
  next += shared_pages;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    Request& r = t.requests[i];
    r.pages.assign(shared.begin(), shared.begin() + r.shared_pages);
    r.pages.insert(r.pages.end(), perm.begin() + next, perm.begin() + next + own[i]);
    next += own[i];
  }
}

}  // namespace

Trace make_trace(const std::string& family, uint64_t seed, int32_t page_size, double hole, int32_t steps) {
  const FamilySpec fs = spec_of(family);
  std::mt19937_64 rng(seed * 1000003ull + std::hash<std::string>{}(family));
  auto uni = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  Trace t;
  t.family = family;
  t.max_active = fs.max_active;
  t.page_size = page_size;
  // Enough requests for the whole trace: the initial batch plus the replacements of requests
  // that finish (decode lengths >= 8, so at most steps / 8 generations).
  // (b256: decode lengths average 28 steps, so steps / 16 + 2 generations suffice and keep its
  // pool near 13 GB.)
  const int32_t n = fs.max_active * (fs.max_active >= 256 ? steps / 16 + 2 : steps / 8 + 2);
  // Zipf(1.1) over 128 length classes of 1K.
  std::vector<double> zcdf(128);
  for (int i = 0; i < 128; ++i) zcdf[i] = (i ? zcdf[i - 1] : 0.0) + 1.0 / std::pow(double(i + 1), 1.1);
  double arrival = 0;
  std::exponential_distribution<double> gap(double(fs.max_active) / 8.0);  // ~max_active / 8 per step
  for (int32_t i = 0; i < n; ++i) {
    Request r;
    r.arrival = i < fs.max_active ? 0 : static_cast<int32_t>(arrival);
    if (i >= fs.max_active) arrival += gap(rng);
    r.decode = uni(8, 48);
    if (family == "bucketed") {
      r.prompt = 8192 << (i % 4);
    } else if (family == "bucketed_b1") {  // one request at a time: start at the long buckets
      r.prompt = 8192 << ((i + 2) % 4);
    } else if (family == "homogeneous") {
      r.prompt = 32768;
    } else if (family == "bimodal") {
      r.prompt = i % 4 == 0 ? uni(32768, 65536) : uni(1024, 4096);
    } else if (family == "uniform") {
      r.prompt = uni(1024, 65536);
    } else if (family == "zipf") {
      const double u = std::uniform_real_distribution<double>(0, zcdf.back())(rng);
      const int cls = int(std::lower_bound(zcdf.begin(), zcdf.end(), u) - zcdf.begin());
      r.prompt = (cls + 1) * 1024 - uni(0, 1023);
    } else if (family == "shared") {
      r.prompt = fs.shared_prefix + uni(256, 4096);
      r.shared_pages = fs.shared_prefix / page_size;
    } else {  // b256
      r.prompt = uni(512, 4096);
    }
    t.requests.push_back(std::move(r));
  }
  assign_pages(t, fs.shared_prefix / page_size, hole, rng);
  return t;
}

std::vector<Step> simulate_steps(const Trace& t, int32_t steps) {
  std::vector<Step> out;
  std::vector<int32_t> running, decoded(t.requests.size(), 0);
  size_t next = 0;
  for (int32_t s = 0; s < steps; ++s) {
    while (int32_t(running.size()) < t.max_active && next < t.requests.size() && t.requests[next].arrival <= s)
      running.push_back(int32_t(next++));
    Step st;
    int32_t sharers = 0;
    int64_t shared_key_total = 0;
    for (int32_t r : running) {
      const Request& q = t.requests[r];
      st.req.push_back(r);
      st.kv_len.push_back(q.prompt + decoded[r] + 1);
      if (q.shared_pages > 0) {
        ++sharers;
        shared_key_total = int64_t(q.shared_pages) * t.page_size;
      }
    }
    if (sharers >= 2) st.shared_keys = shared_key_total * (sharers - 1);
    out.push_back(std::move(st));
    std::vector<int32_t> still;
    for (int32_t r : running)
      if (++decoded[r] < t.requests[r].decode) still.push_back(r);
    running.swap(still);
  }
  return out;
}

Trace make_hybrid_trace(uint64_t seed, int32_t page_size, double hole, int32_t steps, std::vector<HybridStep>* out) {
  std::mt19937_64 rng(seed * 1000003ull + std::hash<std::string>{}("hybrid"));
  auto uni = [&](int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); };
  Trace t;
  t.family = "hybrid";
  t.max_active = kHybridMaxPrefill + kHybridMaxDecode;
  t.page_size = page_size;
  // The decode pool: prompts 1K .. 32K - steps, so no decoder passes 32K keys within the trace.
  for (int32_t i = 0; i < kHybridMaxDecode; ++i) {
    Request r;
    r.prompt = uni(1024, 32768 - std::max(steps, 1));
    r.decode = std::max(steps, 1);
    t.requests.push_back(std::move(r));
  }
  out->assign(size_t(std::max(steps, 0)), HybridStep{});
  for (int32_t s = 0; s < steps; ++s) {
    HybridStep& st = (*out)[s];
    const int32_t np = uni(1, kHybridMaxPrefill);
    for (int32_t p = 0; p < np; ++p) {
      const int32_t chunk = 512 << uni(0, 2);  // 512, 1024 or 2048 (kHybridMaxChunk)
      Request r;
      r.arrival = s;
      r.prompt = uni(0, 16384) + chunk;  // history + the chunk: the chunk's keys are in the cache
      st.pre_req.push_back(int32_t(t.requests.size()));
      st.pre_chunk.push_back(chunk);
      st.pre_kv.push_back(r.prompt);
      t.requests.push_back(std::move(r));
    }
    const int32_t nd = uni(8, kHybridMaxDecode);
    for (int32_t d = 0; d < nd; ++d) {
      st.dec_req.push_back(d);
      st.dec_kv.push_back(t.requests[d].prompt + s + 1);
    }
  }
  assign_pages(t, 0, hole, rng);
  return t;
}

}  // namespace weft::serve
