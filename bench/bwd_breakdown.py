#!/usr/bin/env python3
"""Per-kernel times of attnc's backward and cuDNN's, side by side (torch.profiler / CUPTI).

    python3 bench/bwd_breakdown.py --lib build/libattn.so [--dims 64,128] [--seqs 1024,4096]

bench.py times each backward as a whole; this splits it into its kernels (attnc: the row pass
that writes delta and zeroes dQ's accumulator, the main kernel, the convert pass; cuDNN: its
own pre-pass, main kernel and dQ conversion), so a gap at short sequences can be laid on the
kernel that causes it. Same shapes and tensors as bench.py --backward (B*S = 16384,
H = 2048/D). Times are per backward, averaged over the profiled repetitions.
"""
import argparse, collections, os, sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, backward_graph_text, backward_sets  # noqa: E402


def kernel_times(fn, reps):
    """{kernel name: microseconds per call of fn} over reps calls (after one warm-up)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    acc = collections.OrderedDict()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            acc[ev.name] = acc.get(ev.name, 0.0) + ev.device_time / reps
    return acc


def short(name, n=70):
    return name if len(name) <= n else name[:n - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default="1024,4096")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    torch.zeros(1, device="cuda")  # a current context before libattn compiles
    attn = Attn(args.lib)
    for D in [int(d) for d in args.dims.split(",")]:
        H = 2048 // D
        for causal in (False, True):
            mod = attn.compile("bwd", backward_graph_text(D, causal))
            for S in [int(s) for s in args.seqs.split(",")]:
                B = max(1, 16384 // S)
                q, k, v, do, dq, dk, dv, o, lse, c = backward_sets(attn, mod, B, H, S, D, n=1)[0]
                tq, tk, tv = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

                    def cudnn():
                        torch.autograd.grad(out, (tq, tk, tv), do, retain_graph=True)
                    ours = kernel_times(lambda: attn.launch_backward(c), args.reps)
                    theirs = kernel_times(cudnn, args.reps)
                print(f"\n## D {D}, S {S}, B {B}, H {H}, causal {causal}")
                for who, t in (("attnc", ours), ("cuDNN", theirs)):
                    tot = sum(t.values())
                    print(f"{who}: total {tot:.1f} us")
                    for name, us in t.items():
                        print(f"    {us:9.1f} us  {100 * us / tot:5.1f}%  {short(name)}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
