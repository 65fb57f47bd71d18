#!/usr/bin/env python3
"""torch.topk on a GPU for the same sizes and distributions as mgs-bench-compress.

Prints one JSON object per measurement (baseline for the CUDA selectors):
  python3 bench/compress/torch_topk.py --n 25557032 --density 0.001 --dist t3
The data follow the same distribution (not the same bits) as the C++ bench.
"""
import argparse
import json

import torch


def make(dist, n, device):
    g = torch.Generator(device=device).manual_seed(1)
    if dist == "laplace":
        e = torch.empty(n, device=device).exponential_(generator=g)
        s = torch.randint(0, 2, (n,), device=device, generator=g) * 2 - 1
        x = e * s
    elif dist == "t3":
        z = torch.randn(n, device=device, generator=g)
        c = torch.distributions.Chi2(torch.tensor(3.0, device=device)).sample((n,))
        x = z / torch.sqrt(c / 3)
    else:
        x = torch.randn(n, device=device, generator=g)
    return (x * 1e-3).float()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[25557032])
    p.add_argument("--density", type=float, nargs="+", default=[0.001])
    p.add_argument("--dist", default="normal", choices=["normal", "laplace", "t3"])
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    for n in a.n:
        x = make(a.dist, n, dev)
        for rho in a.density:
            k = max(1, min(n, int(n * rho)))
            times = []
            for i in range(a.reps + 1):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.topk(x.abs(), k, sorted=False)
                end.record()
                torch.cuda.synchronize()
                if i:
                    times.append(start.elapsed_time(end))
            times.sort()
            print(json.dumps({"selector": "torch.topk", "device": "cuda:" + name, "dist": a.dist,
                              "n": n, "k": k, "median_ms": times[len(times) // 2]}))


if __name__ == "__main__":
    main()
