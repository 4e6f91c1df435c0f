#!/usr/bin/env python3
"""Small GPT-style training loop for gputrace's GPU check.

Many small kernels (a 4-layer transformer at small width), an H2D copy of
every batch from pinned memory, and one NCCL all-reduce per step on a
single-rank process group. Prints one JSON line with per-step wall times.

  train_small.py [--steps N] [--warmup N] [--profile OUT.json]

--profile wraps the whole run (model creation included) in torch.profiler
with CPU and CUDA activities and exports a Chrome/Kineto trace, so its
totals compare with a gputrace trace of the same script.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=4096, d=256, heads=4, layers=4, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def run(args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = TinyGPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, seq, vocab = 16, 128, 4096
    host_x = torch.randint(0, vocab, (batch, seq)).pin_memory()
    host_y = torch.randint(0, vocab, (batch, seq)).pin_memory()
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        x = host_x.to(dev, non_blocking=True)
        y = host_y.to(dev, non_blocking=True)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        flat = torch.cat([p.grad.view(-1) for p in model.parameters() if p.grad is not None][:4])
        dist.all_reduce(flat)
        opt.step()
        loss.item()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    dist.destroy_process_group()
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            times = run(args)
        prof.export_chrome_trace(args.profile)
    else:
        times = run(args)
    print(json.dumps({"steps": len(times), "median_step_s": statistics.median(times), "mean_step_s": statistics.fmean(times)}))


if __name__ == "__main__":
    main()
