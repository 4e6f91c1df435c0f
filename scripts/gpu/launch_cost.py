#!/usr/bin/env python3
"""CPU cost of one kernel launch: a loop of tiny in-place adds (one
cudaLaunchKernel each). Prints one JSON line; `median_step_s` is the median
over chunks of the time per launch, so scripts/gpu/overhead.sh can compare
it across variants like a training step.

  launch_cost.py [--steps CHUNKS] [--per N] [--profile OUT.json]
"""
import argparse
import json
import statistics
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20, help="chunks")
ap.add_argument("--per", type=int, default=2000, help="launches per chunk")
ap.add_argument("--profile", metavar="OUT.json", help="time the chunks inside torch.profiler (CPU+CUDA)")
a = ap.parse_args()
x = torch.zeros(1, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
per = []


def chunks():
    for _ in range(a.steps):
        t = time.perf_counter()
        for _ in range(a.per):
            x.add_(1)
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t) / a.per)


if a.profile:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        chunks()
    p.export_chrome_trace(a.profile)
else:
    chunks()
print(json.dumps({"steps": len(per), "median_step_s": statistics.median(per), "launches": a.steps * a.per}))
