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
measure() { # prints "seconds maxrss_kb"
    /usr/bin/time -f "%e %M" "$@" 2>&1 >/dev/null | tail -1
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
    read -r gs gk < <(measure "$G" report --json "$t")
    printf '%-60s %10s %10.1f %10s %10.1f %8.0f %8.1f\n' "$(basename "$t")" "$hs" "$(echo "$hk/1024" | bc -l)" "$gs" "$(echo "$gk/1024" | bc -l)" \
        "$(echo "$hs/($gs+0.001)" | bc -l)" "$(echo "$hk/$gk" | bc -l)"
    rm -rf "$dir"
done
