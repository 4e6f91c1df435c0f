#!/usr/bin/env python3
"""A realistic training loop for gputrace's overhead check: GPT-2 small
(12 layers, width 768, 12 heads, context 1024, vocabulary 50257) in bf16
autocast with fused AdamW, on random tokens. With --cuda-graphs the whole
step (forward, backward, optimizer) is captured once into a CUDA graph and
replayed, as `torch.compile(mode="reduce-overhead")` and serving engines do.
Prints one JSON line; `median_step_s` is what scripts/gpu/levers.sh compares.

  train_gpt.py [--steps N] [--warmup N] [--batch B] [--seq T] [--cuda-graphs]
               [--profile OUT.json]

--profile runs the timed steps inside torch.profiler (CPU and CUDA
activities) and exports its trace, for the torch.profiler column.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, d=768, heads=12, layers=12, seq=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--cuda-graphs", action="store_true")
    ap.add_argument("--profile", metavar="OUT.json")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT2(seq=a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True, capturable=a.cuda_graphs)
    x = torch.randint(0, 50257, (a.batch, a.seq), device=dev)
    y = torch.randint(0, 50257, (a.batch, a.seq), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float().view(-1, 50257), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss

    run = step
    if a.cuda_graphs:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        run = g.replay
    for _ in range(a.warmup):
        run()
    torch.cuda.synchronize()

    def timed():
        times = []
        for _ in range(a.steps):
            t = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return times

    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            times = timed()
        p.export_chrome_trace(a.profile)
    else:
        times = timed()
    tokens = a.batch * a.seq
    med = statistics.median(times)
    print(json.dumps({"steps": len(times), "median_step_s": med, "tokens_per_s": tokens / med,
                      "cuda_graphs": a.cuda_graphs}))


if __name__ == "__main__":
    main()
