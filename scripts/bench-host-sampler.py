#!/usr/bin/env python3
"""What `gputrace run`'s host sampler costs the job (#40, BENCHMARKS.md).

Runs one fixed CPU-bound Python job (a main-thread loop of fixed work, four
idle threads, two worker processes doing the same fixed work) under
`gputrace run`, alternating `--no-host-samples` and `--host-sample-hz HZ`,
ROUNDS times each in the same run of this script. For each run it records
the job's own CPU time (its processes' user + system, from getrusage in
the job) and wall time, and the launcher's CPU time (gputrace's own,
the sampler thread included: getrusage of the launcher minus the job's).

    scripts/bench-host-sampler.py [--gputrace target/release/gputrace] [--hz 100] [--rounds 5]

Prints one line per run and medians with the sampler's cost to the job as
the relative change in the job's CPU time and wall time.
"""
import argparse, os, resource, statistics, subprocess, sys, tempfile

JOB = r'''
import os, resource, sys, threading, time
N = int(sys.argv[1])
def work():
    x = 0
    for i in range(N):
        x += i * i
    return x
def idle(ev):
    ev.wait()
ev = threading.Event()
threads = [threading.Thread(target=idle, args=(ev,)) for _ in range(4)]
for t in threads: t.start()
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        work()
        os._exit(0)
    kids.append(pid)
t0 = time.perf_counter()
work()
for k in kids: os.waitpid(k, 0)
wall = time.perf_counter() - t0
ev.set()
for t in threads: t.join()
me = resource.getrusage(resource.RUSAGE_SELF)
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"JOB {me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime:.4f} {wall:.4f}", flush=True)
'''

def one(gputrace, flags, n, out_dir, job):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([gputrace, "run", "-o", out_dir, *flags, "--", sys.executable, job, str(n)],
                       capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next(l for l in p.stdout.splitlines() if l.startswith("JOB "))
    job_cpu, wall = map(float, line.split()[1:])
    total = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return job_cpu, wall, total - job_cpu

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gputrace", default="target/release/gputrace")
    ap.add_argument("--hz", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=6_000_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job.py")
        open(job, "w").write(JOB)
        res = {"off": [], "on": []}
        for r in range(a.rounds):
            for mode, flags in (("off", ["--no-host-samples"]), ("on", ["--host-sample-hz", str(a.hz)])):
                out = os.path.join(d, f"{mode}{r}")
                job_cpu, wall, launcher = one(a.gputrace, flags, a.n, out, job)
                res[mode].append((job_cpu, wall, launcher))
                print(f"round {r} sampling {mode:<3}: job CPU {job_cpu:.3f} s, wall {wall:.3f} s, launcher CPU {launcher:.3f} s")
        med = {m: [statistics.median(x[i] for x in v) for i in range(3)] for m, v in res.items()}
        (c0, w0, l0), (c1, w1, l1) = med["off"], med["on"]
        print(f"median job CPU: {c0:.3f} s off, {c1:.3f} s on ({100 * (c1 - c0) / c0:+.2f}%)")
        print(f"median job wall: {w0:.3f} s off, {w1:.3f} s on ({100 * (w1 - w0) / w0:+.2f}%)")
        print(f"median launcher CPU: {l0:.3f} s off, {l1:.3f} s on (sampler at {a.hz} Hz: {(l1 - l0) / w1 * 100:.2f}% of one CPU over the job's wall time)")

if __name__ == "__main__":
    main()
