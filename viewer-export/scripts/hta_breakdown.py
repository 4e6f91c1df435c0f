#!/usr/bin/env python3
"""Check that HTA reads gputrace's Chrome/Kineto JSON export.

Usage: hta_breakdown.py DIR

DIR holds one `*.json` export per rank (e.g. from
`cargo run -p viewer-export --example export_synth -- DIR 4 6`, or
`gputrace export ... --format chrome --rank R` for each rank). Runs HTA's
temporal breakdown and checks, per rank, that HTA found the rank
(`distributedInfo`), and that its idle and busy time agree with a union of
the kernel, memcpy and memset intervals computed here from the same file
(within 1% of the span: HTA rounds timestamps down to whole microseconds).

Needs: pip install HolisticTraceAnalysis psutil
"""
import json
import os
import sys

try:
    from hta.trace_analysis import TraceAnalysis
except ImportError as e:
    print(f"SKIP: {e}; install with: pip install HolisticTraceAnalysis psutil")
    sys.exit(0)


def union_busy(path):
    with open(path) as f:
        trace = json.load(f)
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                 if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, (s0, e0) = 0.0, gpu[0]
    for s, e in gpu[1:]:
        if s > e0:
            busy += e0 - s0
            s0, e0 = s, e
        else:
            e0 = max(e0, e)
    busy += e0 - s0
    return trace["distributedInfo"]["rank"], busy, gpu[-1][1] - gpu[0][0]


def main(trace_dir):
    files = sorted(f for f in os.listdir(trace_dir) if f.endswith(".json"))
    ours = {}
    for f in files:
        rank, busy, span = union_busy(os.path.join(trace_dir, f))
        ours[rank] = (busy, span)
    breakdown = TraceAnalysis(trace_dir=trace_dir).get_temporal_breakdown(visualize=False)
    print(breakdown.to_string())
    assert sorted(breakdown["rank"]) == sorted(ours), f"HTA ranks {list(breakdown['rank'])} != files {sorted(ours)}"
    for _, row in breakdown.iterrows():
        busy, span = ours[row["rank"]]
        hta_busy = row["compute_time(us)"] + row["non_compute_time(us)"]
        for what, hta, mine in (("span", row["kernel_time(us)"], span), ("busy", hta_busy, busy)):
            assert abs(hta - mine) <= 0.01 * span, f"rank {row['rank']}: HTA {what} {hta} us, union {mine:.1f} us"
    print(f"ok: HTA read {len(ours)} ranks; idle and busy time agree with the union within 1%")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
