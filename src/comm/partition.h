// Internal (host and device): which tokens each rank owns in the two-shot schedule, and which
// CTA handles which rows. Pure arithmetic; the kernel and the host tests use the same code.
//
// Ownership: rank r owns the contiguous slice [begin, begin + count) of the tokens, split at
// token boundaries as evenly as possible (the first tokens % world ranks get one more token).
// With tokens < world some ranks own nothing.
// CTA mapping inside a segment of n rows: rows are grouped in slots of `rows_per_cta`
// consecutive rows (the rows a CTA holds at once); slot s belongs to CTA s % num_ctas. The same
// mapping decides which rows a CTA copies in, reduces and copies out, so each CTA only ever
// depends on the CTA of the same index on the other ranks (one LSA barrier per CTA index).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define WEFT_HD __host__ __device__ __forceinline__
#else
#define WEFT_HD inline
#endif

namespace weft::comm_detail {

struct TokenRange {
  int64_t begin = 0;
  int64_t count = 0;
};

WEFT_HD TokenRange owned_range(int64_t tokens, int world, int rank) {
  const int64_t base = tokens / world, rem = tokens % world;
  TokenRange r;
  r.begin = rank * base + (rank < rem ? rank : rem);
  r.count = base + (rank < rem ? 1 : 0);
  return r;
}

// CTA that handles row k (0-based inside its segment).
WEFT_HD int cta_of_row(int64_t k, int rows_per_cta, int num_ctas) {
  return static_cast<int>((k / rows_per_cta) % num_ctas);
}

}  // namespace weft::comm_detail
