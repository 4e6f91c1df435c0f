"""A stand-in inference server for tests/serving.rs: the real prometheus_client
(the library vLLM and SGLang expose their metrics with) serving vLLM's
documented families on 127.0.0.1, with scripted traffic, while the test
doubles' testprog makes the GPU timeline.

Usage: serving_server.py PORT_FILE [TESTPROG ...]

Sequence (each phase waits for scrapes, so the scraper's window is known):
 1. before any scrape: a history (7 requests, observations) that the
    window's deltas must leave out;
 2. once scraped twice: the traffic of the window (below), the GPU program
    runs meanwhile with requests waiting;
 3. gauges back to idle; exit after two more scrapes.

The traffic of the window, which tests/serving.rs checks number by number:
 requests: 90 stop + 10 length completed, 3 abort (failed)
 prompt tokens 12800, generation tokens 25600
 TTFT: 50 x 0.03 s, 40 x 0.3 s, 10 x 3 s (vLLM's buckets: p50 0.04, p95 3.75, p99 4.75)
 ITL: 1000 x 0.012 s, 100 x 0.07 s
 e2e: 100 x 1.5 s
 queue: 80 x 0.002 s, 20 x 0.8 s
 while the GPU runs: running 8, waiting 5, KV-cache 0.93; idle: 0, 0, 0.02
"""
import subprocess
import sys
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

registry = CollectorRegistry()
scrapes = 0
scraped = threading.Condition()


class ScrapeCounter:
    """Counts collections (one per scrape of /metrics)."""

    def describe(self):
        return []

    def collect(self):
        global scrapes
        with scraped:
            scrapes += 1
            scraped.notify_all()
        return []


labels = ["model_name"]
M = {"model_name": "test/model"}
running = Gauge("vllm:num_requests_running", "Requests running.", labels, registry=registry)
waiting = Gauge("vllm:num_requests_waiting", "Requests waiting.", labels, registry=registry)
kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=registry)
prompt = Counter("vllm:prompt_tokens", "Prefill tokens.", labels, registry=registry)
generation = Counter("vllm:generation_tokens", "Generation tokens.", labels, registry=registry)
success = Counter("vllm:request_success", "Finished requests.", labels + ["finished_reason"], registry=registry)
# vLLM's buckets (vllm/v1/metrics/loggers.py).
ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT.", labels, registry=registry,
                 buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                          10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0])
itl = Histogram("vllm:inter_token_latency_seconds", "ITL.", labels, registry=registry,
                buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                         20.0, 40.0, 80.0])
latency_buckets = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0]
e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E.", labels, registry=registry, buckets=latency_buckets)
queue = Histogram("vllm:request_queue_time_seconds", "Queue.", labels, registry=registry, buckets=latency_buckets)
# Registered last, so collected last: once it counts a scrape, every value of
# that scrape has been read and the script may change them.
registry.register(ScrapeCounter())


def wait_scrapes(n):
    with scraped:
        target = scrapes + n
        if not scraped.wait_for(lambda: scrapes >= target, timeout=60):
            sys.exit("serving_server: not scraped in 60 s")


def observe(h, value, n):
    for _ in range(n):
        h.labels(**M).observe(value)


server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_port))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])

# 1. History before the window.
success.labels(finished_reason="stop", **M).inc(7)
prompt.labels(**M).inc(700)
generation.labels(**M).inc(900)
observe(ttft, 0.009, 7)
observe(itl, 0.2, 30)
observe(e2e, 9.0, 7)
observe(queue, 0.1, 7)
kv.labels(**M).set(0.02)
running.labels(**M).set(0)
waiting.labels(**M).set(0)
wait_scrapes(2)

# 2. The window's traffic, with the GPU busy and requests queued.
running.labels(**M).set(8)
waiting.labels(**M).set(5)
kv.labels(**M).set(0.93)
gpu = subprocess.Popen(sys.argv[2:]) if len(sys.argv) > 2 else None
success.labels(finished_reason="stop", **M).inc(90)
success.labels(finished_reason="length", **M).inc(10)
success.labels(finished_reason="abort", **M).inc(3)
prompt.labels(**M).inc(12800)
generation.labels(**M).inc(25600)
observe(ttft, 0.03, 50)
observe(ttft, 0.3, 40)
observe(ttft, 3.0, 10)
observe(itl, 0.012, 1000)
observe(itl, 0.07, 100)
observe(e2e, 1.5, 100)
observe(queue, 0.002, 80)
observe(queue, 0.8, 20)
wait_scrapes(2)
if gpu is not None:
    rc = gpu.wait()
    if rc != 0:
        sys.exit(f"serving_server: the GPU program exited {rc}")

# 3. Idle, then leave.
running.labels(**M).set(0)
waiting.labels(**M).set(0)
kv.labels(**M).set(0.02)
wait_scrapes(2)
time.sleep(0.05)
