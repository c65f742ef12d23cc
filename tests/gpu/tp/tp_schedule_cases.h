// The TP layer schedules the world-1 and world-2 tests run against kUnsplit: schedule, split
// (0: the planner's m1) and comm CTAs, as TpLayerOptions and a printable tag.
#pragma once
#include <cstdint>
#include <string>

#include "weft/tp_layer.h"

namespace weft::test {

struct TpScheduleCase {
  TpSchedule sched;
  int64_t split;  // 0: planner
  int ctas;

  TpLayerOptions options() const {
    TpLayerOptions o;
    o.schedule = sched;
    o.split_tokens = split;
    o.comm_ctas = ctas;
    return o;
  }
  std::string tag() const {
    return std::string(tp_schedule_name(sched)) + " split " + std::to_string(split) + " ctas " +
           std::to_string(ctas);
  }
};

}  // namespace weft::test
