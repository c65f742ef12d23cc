#include "prefill/prefill_config.h"

#include <sstream>

#include "weft/error.h"

namespace weft::prefill {

TileConfig choose_tiles(double avg_packed_qo_len, int32_t head_dim) {
  WEFT_CHECK_ARG(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim",
                 "expected 64, 128 or 256, got " << head_dim);
  int32_t cta_q = 128;
  if (avg_packed_qo_len <= 16) cta_q = 16;
  else if (avg_packed_qo_len <= 64) cta_q = 64;
  for (;;) {
    for (int32_t kv : {128, 64, 32}) {
      if (smem_bytes_of(head_dim, cta_q, kv) <= kSmemBudget &&
          acc_regs_of(head_dim, cta_q, kv) <= kAccRegBudget)
        return TileConfig{head_dim, cta_q, kv};
    }
    // Nothing fits: a smaller query tile frees shared memory (and, for 16, adds KV warps).
    WEFT_CHECK_ARG(cta_q > 16, "head_dim", "no prefill tile fits head_dim " << head_dim);
    cta_q = cta_q == 128 ? 64 : 16;
  }
}

const std::vector<TileConfig>& instantiated_configs() {
  static const std::vector<TileConfig> list = {
#define WEFT_X(d, q, kv) TileConfig{d, q, kv},
      WEFT_PREFILL_CONFIGS(WEFT_X)
#undef WEFT_X
  };
  return list;
}

bool is_instantiated(const TileConfig& c) {
  for (const TileConfig& x : instantiated_configs())
    if (x == c) return true;
  return false;
}

std::string describe(const TileConfig& c) {
  std::ostringstream os;
  os << "d" << c.head_dim << "_q" << c.cta_q << "_kv" << c.cta_kv;
  return os.str();
}

}  // namespace weft::prefill
