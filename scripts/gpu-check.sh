#!/usr/bin/env bash
# GPU check: capture fidelity and overhead on a real GPU, side by side with
# torch.profiler. Runs from the repository root on a GPU machine, with the
# release binaries: `$GPUTRACE` (default target/release/gputrace) and the
# agent library next to it. Writes a handful of files under $OUT (or
# ./gpu-check-out): summary.txt, result.json, logs.tar.gz, traces.tar.gz.
# Budget: about 4 minutes; every step has its own timeout.
#
#   scripts/gpu-check.sh
#
# 1. bare: median step time of scripts/gpu/train_small.py
# 2. under gputrace run: step time, and the trace's totals (info --stats)
#    2b. NCCL: collectives recorded through the agent's NCCL profiler plugin
#    2c. report, both exports, compare of the real trace
# 3. under torch.profiler (CUDA activities): step time, and its totals
# 4. the comparison: kernel count, kernel time, H2D bytes (want within 1%),
#    losses (want none), and the overheads vs bare
# 5. torch.profiler inside gputrace run: the job still exits 0, and
#    gputrace says who holds CUPTI
# 6. JAX under gputrace run (skipped when JAX is missing)
# 7. overhead, alternating bare / gputrace / --no-api (scripts/gpu/overhead.sh;
#    ROUNDS=0 skips it, ONLY=overhead runs nothing else)
# 8. ONLY=launch: the same alternation on scripts/gpu/launch_cost.py, the
#    CPU time of one kernel launch under each variant
# 9. ONLY=pm: CUPTI PM sampling (--gpu-metrics): the step time beside a bare
#    run, the pm.* series, the trailer's pm.* counts and the report's hardware
#    section (nothing judged: the numbers are for a person to read)
# 10. ONLY=levers (issue #45, one call, about 7 minutes; run it with
#    `timeout 540`): every capture mode against bare and torch.profiler
#    (scripts/gpu/levers.sh) on the launch-bound loop (the per-launch bisect:
#    agent loaded, kernels only, + API records, + HES, ...) and on GPT-2 small
#    bf16 (scripts/gpu/train_gpt.py) without and with CUDA graphs, nsys beside
#    them when installed; graph-level capture checked against the graph's
#    launches; NVTX, NVML, PM sampling, duty and flight recorder each once.
#    Writes $OUT/levers.json and the lines to copy into BENCHMARKS.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/gpu-check.XXXXXX)
G=${GPUTRACE:-target/release/gputrace}
PY=${PYTHON:-python3}
STEPS=${STEPS:-60}
S="$OUT/summary.txt"
log() { echo "== $*" | tee -a "$S"; }
finish() {
    (cd "$W" && tar czf "$OUT/logs.tar.gz" --exclude=traces --exclude='*.pftrace' --exclude=torchprof.json --exclude=ovh-traces . 2>/dev/null)
    (cd "$W" && tar czf "$OUT/traces.tar.gz" traces 2>/dev/null)
    cp "$W/overhead.json" "$OUT/" 2>/dev/null
    log "done; results in $OUT"
}
trap finish EXIT

log "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  $G version; uname -r; ldd --version | head -1
  echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  $PY -c 'import time; n=200000; t=time.perf_counter_ns(); [time.perf_counter_ns() for _ in range(n)]; print(f"clock read from Python: {(time.perf_counter_ns()-t)/n:.0f} ns")'
  nproc; } 2>&1 | tee -a "$S"

if [ "${ONLY:-}" = launch ]; then
    log "8. CPU cost per kernel launch (ONLY=launch)"
    WORKLOAD=scripts/gpu/launch_cost.py GPUTRACE=$G scripts/gpu/overhead.sh "$W" 2>&1 | tee -a "$S"
    exit 0
fi
if [ "${ONLY:-}" = pm ]; then
    log "9. CUPTI PM sampling (ONLY=pm)"
    timeout 100 $PY scripts/gpu/train_small.py --steps "$STEPS" > "$W/pm-bare.json" 2> "$W/pm-bare.err"; echo "bare rc=$?" | tee -a "$S"
    tail -n1 "$W/pm-bare.json" | tee -a "$S"
    timeout 120 $G run --gpu-metrics -o "$W/traces-pm" -- $PY scripts/gpu/train_small.py --steps "$STEPS" > "$W/pm.json" 2> "$W/pm.err"; echo "--gpu-metrics rc=$?" | tee -a "$S"
    tail -n1 "$W/pm.json" | tee -a "$S"
    grep -a '^gputrace' "$W/pm.err" | head -20 | tee -a "$S"
    $G info "$W/traces-pm" 2>&1 | grep -a -E 'pm\.|LOSSES' | head -20 | tee -a "$S"
    $G info --json "$W/traces-pm" 2>/dev/null | $PY -c 'import json,sys
for f in json.load(sys.stdin)["files"]:
    print({k: v for k, v in f.get("trailer_extra", {}).items() if k.startswith("pm.")})' 2>&1 | tee -a "$S"
    NO_COLOR=1 timeout 60 $G report "$W/traces-pm" 2>&1 | grep -a -E -A12 '^Hardware' | tee -a "$S"
    exit 0
fi
if [ "${ONLY:-}" = levers ]; then
    export GPUTRACE=$G PYTHON=$PY
    log "10a. launch-bound loop: every mode, and the per-launch bisect (us per launch = median_step_s)"
    ROUNDS=${ROUNDS:-2} scripts/gpu/levers.sh "$W" launch scripts/gpu/launch_cost.py --steps 10 --per 2000 2>&1 | tee -a "$S"
    log "10b. GPT-2 small bf16, eager"
    ROUNDS=1 VARIANTS="bare torch.profiler gputrace no-api duty disabled nsys" \
        scripts/gpu/levers.sh "$W" gpt scripts/gpu/train_gpt.py --steps 15 2>&1 | tee -a "$S"
    log "10c. GPT-2 small bf16, one CUDA graph per step"
    ROUNDS=1 VARIANTS="bare torch.profiler gputrace graphs-graph graphs-auto nsys" \
        scripts/gpu/levers.sh "$W" gptgraph scripts/gpu/train_gpt.py --steps 15 --cuda-graphs 2>&1 | tee -a "$S"
    log "10d. graph level: one graph_launch per replay (want steps + warmup = 20), the report's graph section"
    timeout 120 $G run --graphs graph -o "$W/traces-graph" -- $PY scripts/gpu/train_gpt.py --steps 15 --cuda-graphs > "$W/graph.out" 2> "$W/graph.err"; echo "rc=$?" | tee -a "$S"
    $G info --stats "$W/traces-graph" 2>&1 | grep -a -E 'graph|capture\.|cupti\.' | head -20 | tee -a "$S"
    NO_COLOR=1 $G report "$W/traces-graph" 2>&1 | grep -a -A3 'graph level' | tee -a "$S"
    log "10e. NVTX, NVML, PM sampling, duty and flight recorder, once each on the chip"
    timeout 120 $G run --gpu-metrics --gpu-sample-hz 10 -o "$W/traces-feat" -- $PY scripts/gpu/train_small.py --steps 30 > "$W/feat.out" 2> "$W/feat.err"; echo "features rc=$?" | tee -a "$S"
    grep -a '^gputrace' "$W/feat.err" | head -20 | tee -a "$S"
    $G info --stats "$W/traces-feat" 2>&1 | grep -a -E 'marker|nvml\.|pm\.|LOSS|kernels' | head -30 | tee -a "$S"
    timeout 120 $G run --duty 500ms/2s -o "$W/traces-duty" -- $PY scripts/gpu/train_small.py --steps 200 > /dev/null 2> "$W/duty.err"; echo "duty rc=$?" | tee -a "$S"
    NO_COLOR=1 $G report "$W/traces-duty" 2>&1 | grep -a -i -E 'duty|window' | head -5 | tee -a "$S"
    timeout 120 $G run --flight-recorder 10s -o "$W/traces-flight" -- $PY -c 'import os, signal, subprocess, sys, time
p = subprocess.Popen([sys.executable, "scripts/gpu/train_small.py", "--steps", "200"])
time.sleep(20); os.kill(p.pid, signal.SIGUSR2); p.wait()' > /dev/null 2> "$W/flight.err"; echo "flight rc=$?" | tee -a "$S"
    ls "$W/traces-flight" 2>&1 | head | tee -a "$S"
    $PY - "$W" "$OUT/levers.json" <<'PY' 2>&1 | tee -a "$S"
import glob, json, os, sys
w, dst = sys.argv[1], sys.argv[2]
res = {os.path.basename(f)[len("levers."):-len(".json")]: json.load(open(f)) for f in glob.glob(f"{w}/levers.*.json")}
json.dump(res, open(dst, "w"), indent=1)
print("BENCHMARKS.md lines (overhead vs bare; share of torch.profiler's):")
for name, r in sorted(res.items()):
    for v, x in r.items():
        print(f"| {name} | {v} | {x.get('median_s')} s | {x.get('overhead_pct')} % | {x.get('share_of_torch_profiler')} |")
PY
    exit 0
fi
if [ "${ONLY:-}" = overhead ]; then
    log "7. overhead only (ONLY=overhead)"
    GPUTRACE=$G scripts/gpu/overhead.sh "$W" 2>&1 | tee -a "$S"
    exit 0
fi

log "1. bare"
timeout 100 $PY scripts/gpu/train_small.py --steps "$STEPS" > "$W/bare.json" 2> "$W/bare.err"; echo "rc=$?" | tee -a "$S"
tail -n1 "$W/bare.json" | tee -a "$S"

log "2. gputrace run"
timeout 120 $G run -o "$W/traces" -- $PY scripts/gpu/train_small.py --steps "$STEPS" > "$W/gputrace.json" 2> "$W/gputrace.err"; echo "rc=$?" | tee -a "$S"
tail -n1 "$W/gputrace.json" | tee -a "$S"
grep -a '^gputrace' "$W/gputrace.err" | head -40 | tee -a "$S"
$G info --json --stats "$W/traces" > "$W/gputrace-info.json" 2>> "$W/gputrace.err"
$G info --stats "$W/traces" 2>&1 | head -80 | tee -a "$S"

log "2b. NCCL: the single-rank all-reduces carry NCCL's metadata and link to their kernels"
$G report --json "$W/traces" > "$W/gputrace-report.json" 2>> "$W/gputrace.err"
$PY - "$W/gputrace-report.json" <<'PY' 2>&1 | tee -a "$S"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r.get("collectives") or []
print(json.dumps({"communicators": r.get("communicators"), "collectives": rows}, indent=1)[:3000])
linked = sum(x.get("linked", 0) for x in rows)
count = sum(x.get("count", 0) for x in rows)
print(f"nccl: {count} collectives recorded through the plugin, {linked} linked to their kernels")
PY

log "2c. report, exports and compare of the real trace"
NO_COLOR=1 timeout 60 $G report "$W/traces" > "$W/report.txt" 2>&1; echo "report rc=$?" | tee -a "$S"
head -120 "$W/report.txt" | tee -a "$S"
timeout 60 $G export --format perfetto -o "$W/gt.pftrace" "$W/traces" 2>&1 | tail -3 | tee -a "$S"
timeout 60 $G export --format chrome -o "$W/gt.json" "$W/traces" 2>&1 | tail -3 | tee -a "$S"
ls -la "$W"/gt.* 2>&1 | tee -a "$S"
timeout 60 $G compare "$W/traces" > "$W/compare.txt" 2>&1; echo "compare rc=$?" | tee -a "$S"
$PY scripts/gpu/kineto_totals.py "$W/gt.json" 2>&1 | sed 's/^/our chrome export totals: /' | tee -a "$S"

log "3. torch.profiler"
timeout 150 $PY scripts/gpu/train_small.py --steps "$STEPS" --profile "$W/torchprof.json" > "$W/torchprof.out" 2> "$W/torchprof.err"; echo "rc=$?" | tee -a "$S"
tail -n1 "$W/torchprof.out" | tee -a "$S"
$PY scripts/gpu/kineto_totals.py "$W/torchprof.json" > "$W/torchprof-totals.json"
cat "$W/torchprof-totals.json" | tee -a "$S"
timeout 60 $G report "$W/torchprof.json" > "$W/torchprof-report.txt" 2>&1; echo "report of torch.profiler's trace rc=$?" | tee -a "$S"

log "4. comparison"
$PY - "$W" "$OUT/result.json" <<'PY' 2>&1 | tee -a "$S"
import json, sys
w, dst = sys.argv[1], sys.argv[2]
def last_line(p):
    try:
        return json.loads(open(f"{w}/{p}").read().strip().splitlines()[-1])
    except Exception as e:
        return {"error": str(e)}
def load(p):
    try:
        return json.load(open(f"{w}/{p}"))
    except Exception as e:
        return {"error": str(e)}
bare, gt, tp = last_line("bare.json"), last_line("gputrace.json"), last_line("torchprof.out")
info, tpt = load("gputrace-info.json"), load("torchprof-totals.json")
files = info.get("files", []) if isinstance(info, dict) else []
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
json.dump(res, open(dst, "w"), indent=1)
PY

log "5. torch.profiler inside gputrace run"
timeout 120 $G run -o "$W/traces-both" -- $PY scripts/gpu/train_small.py --steps 10 --profile "$W/both.json" > "$W/both.out" 2> "$W/both.err"; echo "rc=$?" | tee -a "$S"
grep -a '^gputrace' "$W/both.err" | head -20 | tee -a "$S"
$PY scripts/gpu/kineto_totals.py "$W/both.json" 2>&1 | sed 's/^/torch.profiler saw: /' | tee -a "$S"

log "6. JAX under gputrace run"
if $PY -c 'import jax' 2>/dev/null; then
    timeout 90 $G run -o "$W/traces-jax" -- $PY -c '
import jax, jax.numpy as jnp
x = jnp.ones((2048, 2048))
for _ in range(20):
    x = jnp.tanh(x @ x / 2048)
print("jax", jax.__version__, jax.devices(), float(x.sum()))' > "$W/jax.out" 2> "$W/jax.err"; echo "rc=$?" | tee -a "$S"
    tail -n2 "$W/jax.out" | tee -a "$S"
    grep -a '^gputrace' "$W/jax.err" | head -20 | tee -a "$S"
    $G info --stats "$W/traces-jax" 2>&1 | head -40 | tee -a "$S"
else
    echo "jax not installed: skipped" | tee -a "$S"
fi

log "7. overhead (alternating runs)"
if [ "${ROUNDS:-3}" != 0 ]; then
    GPUTRACE=$G scripts/gpu/overhead.sh "$W" 2>&1 | tee -a "$S"
fi
