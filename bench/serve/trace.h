// Serving traces of weft-serve-sim (pure C++): continuous decode steps over requests with an
// arrival step, a prompt length and a decode length, each owning a page list of its reserved
// length, scattered over a physical page universe with holes (PersistentKV section 3.7: the
// universe has ceil(pages / (1 - hole)) ids, a seeded permutation of it, each request a
// consecutive slice of the permutation, so logical order is kept and physical ids scatter).
//
// Families (max active requests per step in parentheses, the decode shape of Llama-3-8B):
//   bucketed     prompts cycle 8K, 16K, 32K, 64K (4)
//   bucketed_b1  the same, one request at a time (1)
//   homogeneous  32K prompts (8)
//   bimodal      1 long (32K..64K) : 3 short (1K..4K) (8)
//   uniform      prompts uniform in [1K, 64K] (8)
//   zipf         prompts Zipf(1.1) over 1K .. 128K in 1K steps (8)
//   shared       tool-agent-like: a 4K system prompt shared by every request (same page ids)
//                + a private 256..4K suffix (32)
//   b256         256 short requests (512..4K): the plan-time regime (256)
// Decode lengths are uniform in [8, 48] tokens, so requests finish and new ones are admitted
// during the trace; arrivals are a Poisson stream dense enough to keep the batch full.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft::serve {

struct Request {
  int32_t arrival = 0;   // step
  int32_t prompt = 0, decode = 0;
  int32_t shared_pages = 0;      // leading pages that are the family's shared prefix
  std::vector<int32_t> pages;    // physical ids of the reserved length, logical order
};

struct Trace {
  std::string family;
  int32_t max_active = 0;
  int32_t page_size = 16;
  int64_t num_pages = 0;         // physical universe (pool size)
  int32_t max_blocks = 0;        // longest page list: the block table's row width
  std::vector<Request> requests;
};

// One decode step: the active requests and their current lengths (prompt + tokens decoded so
// far + the token being decoded).
struct Step {
  std::vector<int32_t> req;      // indices into Trace::requests
  std::vector<int32_t> kv_len;
  int64_t shared_keys = 0;       // keys a prefix-sharing plan reads once instead of per sharer
};

const std::vector<std::string>& family_names();
Trace make_trace(const std::string& family, uint64_t seed, int32_t page_size, double hole_fraction, int32_t steps);
// Continuous batching: admit arrived requests (FIFO) while fewer than max_active are running;
// every running request decodes one token per step and leaves after its decode length.
std::vector<Step> simulate_steps(const Trace& t, int32_t steps);

// The hybrid family (not in family_names(): its steps mix prefill chunks with decodes, so the
// decode routes and the decode router's calibration do not apply; weft-serve-sim runs it through
// weft::BatchPODAttention on --families hybrid). Per step 1..2 requests in chunked prefill (a
// chunk of 512, 1024 or 2048 new tokens on a history of 0..16K, the chunk attending to all of its
// history and causally to itself: its kv_len is history + chunk) beside 8..64 decoding requests
// (kv 1K..32K). The decoders are a pool of 64 requests whose first `decode batch` run at a step
// (each one token longer per step); every prefill chunk is its own request (its page list holds
// history + chunk tokens). Pages as make_trace's (holes, one scattered permutation).
struct HybridStep {
  std::vector<int32_t> pre_req, pre_chunk, pre_kv;  // prefill: request, new tokens, history + chunk
  std::vector<int32_t> dec_req, dec_kv;             // decode: request, kv_len
};
constexpr int32_t kHybridMaxPrefill = 2, kHybridMaxChunk = 2048, kHybridMaxDecode = 64;
Trace make_hybrid_trace(uint64_t seed, int32_t page_size, double hole_fraction, int32_t steps,
                        std::vector<HybridStep>* out_steps);

}  // namespace weft::serve
