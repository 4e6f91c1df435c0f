#!/usr/bin/env bash
# Step-time overhead of capture, measured in alternation so that drifts of
# the machine hit every variant alike:
#   bare | gputrace run | gputrace run --no-api | agent loaded, capture off
#   (GPUTRACE_DISABLE=1) [| gputrace run with another agent]
# ROUNDS rounds (default 3) of STEPS steps (default 200) of train_small.py.
#   scripts/gpu/overhead.sh OUTDIR
# env: GPUTRACE (the CLI), PYTHON, ROUNDS, STEPS, WORKLOAD (default
# scripts/gpu/train_small.py; scripts/gpu/launch_cost.py times one launch),
# and AGENTS="name=path ..."
# for extra variants with another agent library (e.g. an older build).
# Writes OUTDIR/overhead.json: per variant, each round's median step time,
# and the median of those against bare.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=$1
mkdir -p "$OUTDIR"
G=${GPUTRACE:-target/release/gputrace}
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-200}
T=${WORKLOAD:-scripts/gpu/train_small.py}
variants="bare gputrace no-api disabled"
for a in ${AGENTS:-}; do variants="$variants agent:${a%%=*}"; done
for r in $(seq "$ROUNDS"); do
    for v in $variants; do
        o="$OUTDIR/ovh.$v.$r"
        o=${o//:/_}
        case $v in
            bare) timeout 120 $PY $T --steps "$STEPS" > "$o" 2>&1 ;;
            gputrace) timeout 120 $G run -o "$OUTDIR/ovh-traces" -- $PY $T --steps "$STEPS" > "$o" 2>&1 ;;
            no-api) timeout 120 $G run --no-api -o "$OUTDIR/ovh-traces" -- $PY $T --steps "$STEPS" > "$o" 2>&1 ;;
            disabled) GPUTRACE_DISABLE=1 timeout 120 $G run -o "$OUTDIR/ovh-traces" -- $PY $T --steps "$STEPS" > "$o" 2>&1 ;;
            agent:*)
                name=${v#agent:}
                path=$(for a in $AGENTS; do [ "${a%%=*}" = "$name" ] && echo "${a#*=}"; done)
                GPUTRACE_AGENT=$path timeout 120 $G run -o "$OUTDIR/ovh-traces" -- $PY $T --steps "$STEPS" > "$o" 2>&1 ;;
        esac
        echo "round $r $v rc=$? $(grep -a median_step_s "$o" | tail -n1)"
    done
done
$PY - "$OUTDIR" $variants <<'PY'
import glob, json, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
res = {}
for v in variants:
    meds = []
    for f in sorted(glob.glob(f"{out}/ovh.{v.replace(':', '_')}.*")):
        for line in open(f, errors="replace"):
            if '"median_step_s"' in line:
                meds.append(json.loads(line)["median_step_s"])
    res[v] = {"round_medians_s": meds, "median_s": statistics.median(meds) if meds else None}
b = res["bare"]["median_s"]
for v, r in res.items():
    r["overhead_pct"] = None if not b or not r["median_s"] else round(100 * (r["median_s"] - b) / b, 2)
print(json.dumps(res, indent=1))
json.dump(res, open(f"{out}/overhead.json", "w"), indent=1)
PY
