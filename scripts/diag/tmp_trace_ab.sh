#!/usr/bin/env bash
# one-off: merge timing of both merges from the trace build
set -u
R=$OUT
for m in warp staged; do
  OUT=$R/$m WEFT_DECODE_MERGE=$m WEFT_COMMIT=ff1ed6e scripts/diag/decode-trace.sh decode/llama3-8b/b1/kv1024 decode/llama3-8b/b1/kv4096 decode/llama3-8b/b1/kv32768 decode/path/tc/llama3-70b/b1/kv32768 > $R/log_$m.txt 2>&1
  rm -f $R/$m/raw.csv
done
python3 - $R <<'PY'
import json,sys
R=sys.argv[1]
for m in ("warp","staged"):
    d=json.load(open(f"{R}/{m}/trace.json"))
    for c in d["cases"]:
        e=c.get("extra",{})
        keys=["trace_span","trace_loop_end_max","trace_last_loop_end","trace_last_item_stored","trace_last_merge_decided","trace_last_exit","trace_merge_med","trace_warm_span","trace_warm_merge_med","trace_warm_last_exit"]
        print(m, c["name"], "%.1f"%(c["ms"]*1e3), " ".join("%s=%.0f"%(k.replace("trace_",""),e[k]) for k in keys if k in e))
PY
