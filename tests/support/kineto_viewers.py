#!/usr/bin/env python3
"""What TensorBoard's PyTorch profiler plugin and HTA make of Kineto JSON traces.

Usage: kineto_viewers.py DIR        (DIR holds one Kineto JSON file per rank)

Prints one JSON object:
- "plugin": per file, what torch-tb-profiler (PyPI `torch-tb-profiler`) shows,
  computed by its own loader (`RunProfileData.parse` then `RunGenerator`), no
  TensorBoard server: the step names, the per-step breakdown (kernel, memcpy,
  memset, communication, runtime, DataLoader, CPU exec, other; µs), the kernel
  table (name -> calls, total µs), the recommendation text, and the warnings
  it logged;
- "hta": HTA's (HolisticTraceAnalysis) profiler steps, temporal breakdown,
  kernel table (name -> count, sum µs) and potential stragglers over the
  directory (or the error it raised).

Exit 2 with "SKIP: ..." on stdout when either package is missing.
"""
import contextlib
import io
import json
import logging
import os
import sys
import tempfile

try:
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator
    from hta.trace_analysis import TraceAnalysis
except ImportError as e:
    print(f"SKIP: {e}; install with: pip install torch-tb-profiler HolisticTraceAnalysis psutil")
    sys.exit(2)


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def plugin(path, cache):
    handler = Collect()
    logger = logging.getLogger("torch.profiler.tensorboard")
    logger.addHandler(handler)
    try:
        data = RunProfileData.parse("worker", "span", path, cache)
        run = RunGenerator("worker", "span", data).generate_run_profile()
    finally:
        logger.removeHandler(handler)
    steps = run.overview["steps"]
    # Each number column is followed by its tooltip column.
    names = [c["name"] for c in steps["columns"] if c.get("type") == "number"]
    rows = {str(r[0]): dict(zip(names, [round(float(v), 3) for v in r[1::2]])) for r in steps["rows"]}
    kernels = {}
    if data.kernel_stat is not None:
        for name, row in data.kernel_stat.iterrows():
            kernels[name] = [int(row["count"]), round(float(row["sum"]), 3)]
    return {
        "steps": [str(r[0]) for r in steps["rows"]],
        "breakdown": rows,
        "kernels": kernels,
        "recommendations": run.overview.get("recommendations", ""),
        "warnings": sorted(set(handler.messages)),
    }


def hta(directory):
    out = {}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        analyzer = TraceAnalysis(trace_dir=directory)
        try:
            out["profiler_steps"] = [int(s) for s in analyzer.get_profiler_steps()]
        except Exception as e:  # noqa: BLE001
            out["profiler_steps"] = f"error: {type(e).__name__}: {e}"
        try:
            tb = analyzer.get_temporal_breakdown(visualize=False)
            out["temporal"] = {
                str(int(r["rank"])): {k: float(r[k]) for k in ("idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)")}
                for _, r in tb.iterrows()
            }
        except Exception as e:  # noqa: BLE001
            out["temporal"] = f"error: {type(e).__name__}: {e}"
        try:
            _, metrics = analyzer.get_gpu_kernel_breakdown(visualize=False, num_kernels=1 << 30, duration_ratio=1.0, include_memory_kernels=True)
            out["kernels"] = {f"{int(r['rank'])}|{r['kernel_type']}|{r['name']}": round(float(r["sum (us)"]), 3) for _, r in metrics.iterrows()}
        except Exception as e:  # noqa: BLE001
            out["kernels"] = f"error: {type(e).__name__}: {e}"
        try:
            out["stragglers"] = sorted(int(r) for r in analyzer.get_potential_stragglers(visualize=False))
        except Exception as e:  # noqa: BLE001
            out["stragglers"] = f"error: {type(e).__name__}: {e}"
    return out


def main():
    directory = sys.argv[1]
    files = sorted(f for f in os.listdir(directory) if f.endswith(".json") or f.endswith(".json.gz"))
    result = {"plugin": {}, "hta": None}
    with tempfile.TemporaryDirectory() as cache:
        for f in files:
            try:
                result["plugin"][f] = plugin(os.path.join(directory, f), cache)
            except Exception as e:  # noqa: BLE001
                result["plugin"][f] = f"error: {type(e).__name__}: {e}"
    result["hta"] = hta(directory)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
