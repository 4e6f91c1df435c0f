#!/usr/bin/env python3
"""Totals from a Chrome/Kineto trace: kernel count, summed kernel time (ns)
and H2D bytes, comparable with `gputrace info --json --stats`."""
import gzip
import json
import sys

path = sys.argv[1]
opener = gzip.open if path.endswith(".gz") else open
with opener(path, "rt") as f:
    trace = json.load(f)
kernels = 0
kernel_ns = 0.0
h2d = 0
copies = 0
for e in trace.get("traceEvents", []):
    if e.get("ph") != "X":
        continue
    cat = (e.get("cat") or "").lower()
    if cat == "kernel":
        kernels += 1
        kernel_ns += float(e.get("dur", 0)) * 1000.0
    elif cat == "gpu_memcpy":
        copies += 1
        name = e.get("name", "")
        if "HtoD" in name:
            h2d += int(e.get("args", {}).get("bytes", 0))
print(json.dumps({"kernels": kernels, "kernel_time_ns": int(kernel_ns), "copies": copies, "htod_bytes": h2d}))
