#include "prefill/prefill_config.h"

#include <sstream>

#include "attention/heuristics.h"

namespace weft::prefill {

TileConfig choose_tiles(double avg_packed_qo_len, int32_t head_dim) {
  const heuristics::PrefillTiles t = heuristics::prefill_tiles(avg_packed_qo_len, head_dim);
  return TileConfig{head_dim, t.cta_q, t.cta_kv};
}

const std::vector<TileConfig>& instantiated_configs() {
  static const std::vector<TileConfig> list = {
#define WEFT_X(d, q, kv) TileConfig{d, q, kv},
      WEFT_PREFILL_CONFIGS(WEFT_X)
#undef WEFT_X
  };
  return list;
}

std::string describe(const TileConfig& c) {
  std::ostringstream os;
  os << "d" << c.head_dim << "_q" << c.cta_q << "_kv" << c.cta_kv;
  return os.str();
}

}  // namespace weft::prefill
