#!/usr/bin/env python3
"""End-to-end cost of the always-on modes (issue #25) on the traced process.

Runs the release `gputrace run` and agent against the C doubles of libcuda and
libcupti (tests/doubles) and samples, every 10 ms, the on-CPU time
(/proc/PID/task/TID/schedstat, ns) of each thread of the traced process
(`testprog`) and of the launcher. What is attributed:

- `gputrace-writer`, the agent's writer thread: the agent's cost per record
  (the buffer callbacks run on the fake CUPTI's thread and cost tens of ns a
  buffer, see `cargo bench -p gputrace-agent --bench agent`);
- `fake-cupti-wrk`: the fake CUPTI making records (not the agent's cost);
- `gputrace-live`, in the launcher: the live metrics collector.

Modes (each ROUNDS times, best round shown, then the spread):

  burst       plain capture, 3 M records as fast as the fake makes them
  burst-fl    the same with --flight-recorder 60s (ring writes; the job exits 3
              so that the ring becomes a trace whose events can be counted)
  paced       plain capture, 600,000 kernels over about 6 s
  paced-met   the same with --metrics (interval 1 s): the traced process's
              cost (should not move) and the collector's CPU per analysis
  paced-duty  the same with --duty 1s/3s: cost per record inside the capture
              windows, and the writer's CPU per second outside them
  idle        plain capture of a job that runs 3 s without GPU work: the
              writer's CPU per second when there is nothing to write

Usage: cargo build --release -p gputrace -p gputrace-agent
       python3 scripts/bench-always-on.py            (ROUNDS=3 by default)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
GPUTRACE = TARGET / "gputrace"
AGENT = TARGET / "libgputrace_agent.so"
ROUNDS = int(os.environ.get("ROUNDS", "3"))

BURST = "version 13.5\ndevice\nburst 3000000\nsleep_ms 300\n"
PACED = "version 13.5\ndevice\nkernels 600000 5000 5000\nsleep_ms 300\n"
IDLE = "version 13.5\ndevice\nkernels 10 1000 1000\nsleep_ms 3000\n"


def thread_times(pid):
    """{tid: (name, on-CPU ns)} of the process `pid` ({} once it is gone)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[tid] = (name, ns)
    return out


def child_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(doubles, scenario, flags, metrics_port=None, exit_code=0):
    """One `gputrace run`; per-thread CPU series and the trace's summary."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "scenario").write_text(scenario)
        env = dict(os.environ)
        env.update(
            FAKE_CUPTI_SCENARIO=str(d / "scenario"),
            FAKE_CUPTI_REPORT=str(d / "report"),
            FAKE_CUPTI_RECORDS="0",
            GPUTRACE_CUPTI=str(doubles / "cupti13/libcupti.so.13"),
            GPUTRACE_AGENT=str(AGENT),
        )
        env.pop("RANK", None)
        cmd = [str(GPUTRACE), "run", *flags, "-o", str(d / "traces"), "--",
               str(doubles / "testprog"), "--ms", "60000", "exit", str(exit_code)]
        t0 = time.time_ns()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        job, samples, launcher, analyses = None, [], {}, None
        while p.poll() is None:
            job = job or child_of(p.pid)
            if job:
                samples.append((time.time_ns(), thread_times(job)))
            for tid, (n, ns) in thread_times(p.pid).items():
                launcher[tid] = (n, max(ns, launcher.get(tid, (n, 0))[1]))
            if metrics_port and job and not os.path.exists(f"/proc/{job}"):
                analyses = scrape(metrics_port) or analyses
            time.sleep(0.01)
        stderr = p.stderr.read().decode(errors="replace")
        if p.returncode != exit_code:
            sys.exit(f"gputrace run {' '.join(flags)} failed ({p.returncode}): {stderr}")
        info = json.loads(subprocess.check_output([str(GPUTRACE), "info", "--json", str(d / "traces")]))
        files = info["files"] if isinstance(info, dict) and "files" in info else info
        f = files[0] if isinstance(files, list) else files
        return dict(samples=samples, launcher=launcher, info=f, wall_s=(time.time_ns() - t0) / 1e9,
                    analyses=analyses, stderr=stderr)


def scrape(port):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
    except OSError:
        return None
    for line in body.splitlines():
        if line.startswith("gputrace_metrics_analyses_total"):
            return int(float(line.split()[-1]))
    return None


def cpu_of(sample, name):
    return sum(ns for n, ns in sample.values() if n == name)


def last_cpu(samples, name):
    """The CPU (ns) of the threads called `name`, each at its last sample
    (a thread that ended is no longer in the later samples)."""
    seen = {}
    for _, s in samples:
        for tid, (n, ns) in s.items():
            if n == name:
                seen[tid] = max(seen.get(tid, 0), ns)
    return sum(seen.values())


def lost(info):
    return sum(v.get("lost", 0) if isinstance(v, dict) else 0 for v in info.get("losses", {}).values())


def windowed(samples, windows):
    """Writer CPU (ns) and time (s) inside and outside the capture windows,
    counting only sample intervals wholly inside or wholly outside one."""
    on = off = on_s = off_s = 0.0
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        dc = cpu_of(b, "gputrace-writer") - cpu_of(a, "gputrace-writer")
        inside = [w for w in windows if w["start"] <= t0 and t1 <= w["end"]]
        overlaps = [w for w in windows if t0 < w["end"] and w["start"] < t1]
        if inside:
            on, on_s = on + dc, on_s + (t1 - t0) / 1e9
        elif not overlaps and t0 >= windows[0]["start"] and t1 <= windows[-1]["end"]:
            off, off_s = off + dc, off_s + (t1 - t0) / 1e9
    return on, on_s, off, off_s


def spread(vals):
    return f"{min(vals):.1f}-{max(vals):.1f}"


def main():
    for p in (GPUTRACE, AGENT):
        if not p.exists():
            sys.exit(f"{p} is missing: cargo build --release -p gputrace -p gputrace-agent")
    tmp = tempfile.TemporaryDirectory()
    doubles = Path(tmp.name)
    subprocess.run([str(ROOT / "tests/doubles/build.sh"), str(doubles)], check=True, stdout=subprocess.DEVNULL)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; rounds: {ROUNDS}")

    def per_record(flags, scenario, label, **kw):
        rows = []
        for _ in range(ROUNDS):
            r = run(doubles, scenario, flags, **kw)
            ev = r["info"]["events_total"]
            w = last_cpu(r["samples"], "gputrace-writer")
            fake = last_cpu(r["samples"], "fake-cupti-wrk")
            rows.append((w / max(ev, 1), ev, w, fake, lost(r["info"]), r))
        best = min(rows, key=lambda x: x[0])
        print(f"{label:<11} writer {best[0]:6.1f} ns/record = {best[1] / best[2] * 1e3 if best[2] else 0:5.1f} M records/s of "
              f"writer CPU ({best[1]} records, {best[4]} lost; rounds {spread([x[0] for x in rows])} ns/record); "
              f"fake CUPTI {best[3] / max(best[1], 1):.1f} ns/record")
        return best, rows

    per_record([], BURST, "burst")
    # Exit 3: the job "fails", so the ring becomes a trace whose events are counted.
    per_record(["--flight-recorder", "60s"], BURST, "burst-fl", exit_code=3)
    per_record([], PACED, "paced")
    port = free_port()
    best, rows = per_record(["--metrics", str(port), "--metrics-interval", "1", "--metrics-linger", "3"], PACED,
                            "paced-met", metrics_port=port)
    per_analysis = []
    for row in rows:
        r = row[5]
        live = sum(ns for n, ns in r["launcher"].values() if n == "gputrace-live")
        if r["analyses"]:
            per_analysis.append(live / r["analyses"] / 1e6)
            print(f"            collector (gputrace-live thread): {live / 1e6:.1f} ms CPU for {r['analyses']} analyses "
                  f"= {live / r['analyses'] / 1e6:.1f} ms each, over a {r['wall_s']:.1f} s run")
    if per_analysis:
        print(f"            collector per analysis: best {min(per_analysis):.1f} ms ({spread(per_analysis)})")
    best, rows = per_record(["--duty", "1s/3s"], PACED, "paced-duty")
    offs = []
    for row in rows:
        r = row[5]
        wins = r["info"]["capture_windows"]
        wins = [{"start": w["start"], "end": w["end"]} for w in wins]
        on, on_s, off, off_s = windowed(r["samples"], wins)
        if off_s > 0:
            offs.append(off / off_s / 1e3)
            print(f"            {len(wins)} windows; writer CPU inside them {on / 1e6:.1f} ms over {on_s:.2f} s, "
                  f"outside {off / 1e6:.2f} ms over {off_s:.2f} s = {off / off_s / 1e3:.0f} us per second off")
    if offs:
        print(f"            duty off phase: best {min(offs):.0f} us of writer CPU per second ({spread(offs)})")
    idle = []
    for _ in range(ROUNDS):
        r = run(doubles, IDLE, [])
        s = r["samples"]
        # From the first sample with the writer to the last one before it ends.
        s = [x for x in s if cpu_of(x[1], "gputrace-writer") > 0]
        if len(s) > 10:
            s = s[5:-2]
            w = cpu_of(s[-1][1], "gputrace-writer") - cpu_of(s[0][1], "gputrace-writer")
            idle.append(w / ((s[-1][0] - s[0][0]) / 1e9) / 1e3)
    if idle:
        print(f"idle        writer {min(idle):.0f} us of CPU per second with nothing to write ({spread(idle)})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
