#!/usr/bin/env bash
# Side by side with Holistic Trace Analysis (HTA): wall time and peak memory
# to load a Kineto trace and compute the temporal breakdown, HTA vs
# `gputrace report --json`, on the largest traces in ../shared/traces.
# HTA is installed from PyPI into a throwaway virtualenv (/tmp/hta-venv).
#
#   scripts/bench-vs-hta.sh            (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/.."
G=${GPUTRACE:-target/release/gputrace}
VENV=${HTA_VENV:-/tmp/hta-venv}
SHARED=${SHARED:-../shared/traces}
[ -x "$G" ] || { echo "build first: cargo build --release" >&2; exit 2; }
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet HolisticTraceAnalysis
fi
traces=(
    "$SHARED/AMD-AGI_TraceLens@171dd74/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
    "$SHARED/facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/df_index_resolver/df_index_resolver.json.gz"
    "$SHARED/facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/nccl_parser_config/nccl_data.json.gz"
)
measure() { # prints "seconds maxrss_kb": wall time (ns clock) and peak RSS of one run of the command
    python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
wall = time.perf_counter() - t
print(f"{wall:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
PY
}
printf '%-60s %10s %10s %10s %10s %8s %8s\n' trace "hta s" "hta MB" "gt s" "gt MB" "speedup" "mem÷"
for t in "${traces[@]}"; do
    [ -f "$t" ] || { echo "skipping $t (absent)"; continue; }
    dir=$(mktemp -d)
    ln -s "$(readlink -f "$t")" "$dir/"
    read -r hs hk < <(measure "$VENV/bin/python" -c "
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir='$dir')
print(a.get_temporal_breakdown(visualize=False))
")
    # gputrace: the median of five runs (HTA runs once: ~10 s, its noise is
    # small in proportion; a 0.1 s run on two threads of a 2-vCPU VM moves by
    # up to 50% from run to run).
    gs=""; gk=0
    for _ in 1 2 3 4 5; do read -r s k < <(measure "$G" report --json "$t"); gs="$gs $s"; gk=$k; done
    gs=$(echo $gs | tr ' ' '\n' | sort -n | sed -n 3p)
    printf '%-60s %10s %10.1f %10s %10.1f %8.0f %8.1f\n' "$(basename "$t")" "$hs" "$(echo "$hk/1024" | bc -l)" "$gs" "$(echo "$gk/1024" | bc -l)" \
        "$(echo "$hs/$gs" | bc -l)" "$(echo "$hk/$gk" | bc -l)"
    rm -rf "$dir"
done
