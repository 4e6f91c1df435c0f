#!/usr/bin/env bash
# GPU check: capture fidelity and overhead on a real GPU, side by side with
# torch.profiler. Runs on the device machine from the repository root with
# the release binaries carried along (target/release/gputrace and
# target/release/libgputrace_agent.so); writes results under $OUT (or
# ./gpu-check-out). Budget: well under 10 minutes.
#
#   scripts/gpu-check.sh
#
# 1. bare: median step time of scripts/gpu/train_small.py
# 2. under gputrace run: step time, and the trace's totals (info --stats)
# 3. under torch.profiler (CUDA activities): step time, and its totals
# 2b. NCCL: the collectives from gputrace's NCCL profiler plugin, linked count
# 4. the comparison: kernel count, kernel time, H2D bytes (want within 1%),
#    losses (want none), and the overheads vs bare.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
G=target/release/gputrace
PY=${PYTHON:-python3}
STEPS=${STEPS:-60}
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

log "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$OUT/summary.txt"
$G version 2>&1 | tee -a "$OUT/summary.txt"

log "1. bare"
timeout 180 $PY scripts/gpu/train_small.py --steps "$STEPS" > "$OUT/bare.json" 2> "$OUT/bare.err"; echo "rc=$?" >> "$OUT/summary.txt"
cat "$OUT/bare.json" | tee -a "$OUT/summary.txt"

log "2. gputrace run"
rm -rf "$OUT/traces"
timeout 180 $G run -o "$OUT/traces" -- $PY scripts/gpu/train_small.py --steps "$STEPS" > "$OUT/gputrace.json" 2> "$OUT/gputrace.err"; echo "rc=$?" >> "$OUT/summary.txt"
cat "$OUT/gputrace.json" | tee -a "$OUT/summary.txt"
grep '^gputrace' "$OUT/gputrace.err" | tee -a "$OUT/summary.txt"
$G info --json --stats "$OUT/traces" > "$OUT/gputrace-info.json" 2>> "$OUT/gputrace.err"
$G info --stats "$OUT/traces" | tee -a "$OUT/summary.txt"

log "2b. NCCL: the single-rank all-reduces carry NCCL's metadata and link to their kernels"
$G report --json "$OUT/traces" > "$OUT/gputrace-report.json" 2>> "$OUT/gputrace.err"
$PY - "$OUT/gputrace-report.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r.get("collectives") or []
print(json.dumps({"communicators": r.get("communicators"), "collectives": rows}, indent=1)[:3000])
linked = sum(x.get("linked", 0) for x in rows)
count = sum(x.get("count", 0) for x in rows)
print(f"nccl: {count} collectives recorded through the plugin, {linked} linked to their kernels")
PY

log "3. torch.profiler"
timeout 240 $PY scripts/gpu/train_small.py --steps "$STEPS" --profile "$OUT/torchprof.json" > "$OUT/torchprof.json.out" 2> "$OUT/torchprof.err"; echo "rc=$?" >> "$OUT/summary.txt"
cat "$OUT/torchprof.json.out" | tee -a "$OUT/summary.txt"
$PY scripts/gpu/kineto_totals.py "$OUT/torchprof.json" > "$OUT/torchprof-totals.json"

log "4. comparison"
$PY - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
def load(p):
    try:
        with open(f"{out}/{p}") as f:
            return json.loads(f.read().strip().splitlines()[-1]) if p.endswith(".out") or p in ("bare.json", "gputrace.json") else json.load(f)
    except Exception as e:
        return {"error": str(e)}
bare, gt, tp = load("bare.json"), load("gputrace.json"), load("torchprof.json.out")
info = load("gputrace-info.json")
tpt = load("torchprof-totals.json")
files = info.get("files", [])
# The training process is the file with the most kernels.
f = max(files, key=lambda x: (x.get("stats") or {}).get("kernels", 0)) if files else {}
s = f.get("stats") or {}
g = {"kernels": s.get("kernels"), "kernel_time_ns": s.get("kernel_time_ns"), "htod_bytes": (s.get("copies") or {}).get("HtoD", [0, 0])[1]}
def pct(a, b):
    return None if not a or not b else round(100.0 * (a - b) / b, 3)
res = {
    "gputrace": g, "torch_profiler": tpt,
    "diff_pct": {k: pct(g.get(k), tpt.get(k)) for k in ("kernels", "kernel_time_ns", "htod_bytes")},
    "losses": f.get("losses"), "complete": f.get("complete"),
    "median_step_s": {"bare": bare.get("median_step_s"), "gputrace": gt.get("median_step_s"), "torch_profiler": tp.get("median_step_s")},
}
b = bare.get("median_step_s")
res["overhead_pct"] = {k: pct(v, b) for k, v in res["median_step_s"].items() if k != "bare"}
print(json.dumps(res, indent=1))
with open(f"{out}/result.json", "w") as fh:
    json.dump(res, fh, indent=1)
PY
log "done; results in $OUT"
