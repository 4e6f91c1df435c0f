#!/usr/bin/env bash
# Overhead of each capture mode of issue #45 against bare and torch.profiler,
# in alternation (drifts of the machine hit every variant alike):
#   bare | torch.profiler | gputrace (defaults) | --no-api | --graphs graph |
#   --graphs auto | --hw-trace on | --per-thread-buffers on | --duty 1s/20s |
#   --flight-recorder 30s | agent loaded, capture off | nsys (when installed)
# on one WORKLOAD with its ARGS, ROUNDS rounds (default 3).
#   scripts/gpu/levers.sh OUTDIR NAME WORKLOAD [ARGS...]
# env: GPUTRACE (the CLI), PYTHON, ROUNDS, VARIANTS (a subset, space-separated).
# Writes OUTDIR/levers.NAME.json: per variant, each round's median step time,
# their median, and the overhead against bare and as a share of torch.profiler's.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=$1 NAME=$2 T=$3
shift 3
mkdir -p "$OUTDIR"
G=${GPUTRACE:-target/release/gputrace}
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-3}
variants=${VARIANTS:-"bare torch.profiler gputrace no-api graphs-graph graphs-auto hw-trace per-thread duty flight disabled nsys"}
tr="$OUTDIR/lev-traces.$NAME"
for r in $(seq "$ROUNDS"); do
    for v in $variants; do
        o="$OUTDIR/lev.$NAME.$v.$r"
        case $v in
            bare) timeout 300 $PY $T "$@" > "$o" 2>&1 ;;
            torch.profiler) timeout 300 $PY $T "$@" --profile "$OUTDIR/lev.$NAME.torchprof.json" > "$o" 2>&1 ;;
            gputrace) timeout 300 $G run -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            no-api) timeout 300 $G run --no-api -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            graphs-graph) timeout 300 $G run --graphs graph -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            graphs-auto) timeout 300 $G run --graphs auto -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            hw-trace) timeout 300 $G run --hw-trace on -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            per-thread) timeout 300 $G run --per-thread-buffers on -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            duty) timeout 300 $G run --duty 1s/20s -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            flight) timeout 300 $G run --flight-recorder 30s -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            disabled) GPUTRACE_DISABLE=1 timeout 300 $G run -o "$tr" -- $PY $T "$@" > "$o" 2>&1 ;;
            nsys)
                if ! command -v nsys >/dev/null; then echo "nsys not installed" > "$o"; continue; fi
                timeout 300 nsys profile -t cuda,nvtx -o "$OUTDIR/lev.$NAME.nsys.$r" --force-overwrite true $PY $T "$@" > "$o" 2>&1 ;;
        esac
        echo "round $r $NAME $v rc=$? $(grep -a median_step_s "$o" | tail -n1)"
    done
done
$PY - "$OUTDIR" "$NAME" $variants <<'PY'
import glob, json, statistics, sys
out, name, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
res = {}
for v in variants:
    meds = []
    for f in sorted(glob.glob(f"{out}/lev.{name}.{v}.*")):
        for line in open(f, errors="replace"):
            if '"median_step_s"' in line:
                meds.append(json.loads(line)["median_step_s"])
    res[v] = {"round_medians_s": meds, "median_s": statistics.median(meds) if meds else None}
b = res.get("bare", {}).get("median_s")
for v, r in res.items():
    r["overhead_pct"] = None if not b or not r["median_s"] else round(100 * (r["median_s"] - b) / b, 2)
tp = res.get("torch.profiler", {}).get("overhead_pct")
for v, r in res.items():
    r["share_of_torch_profiler"] = None if not tp or r["overhead_pct"] is None else round(r["overhead_pct"] / tp, 3)
print(json.dumps(res, indent=1))
json.dump(res, open(f"{out}/levers.{name}.json", "w"), indent=1)
PY
