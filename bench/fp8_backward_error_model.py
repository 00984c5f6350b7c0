"""fp8_backward_error_model.py: the FP8 backward's error by recipe, in float64 on the CPU.

Runs anywhere PyTorch runs (no GPU): python3 bench/fp8_backward_error_model.py [--trials N]

The backward as docs/language.md "FP8 gradients" defines it (what the CPU reference,
ref_backward_full, computes for a graph's grad block), modelled here in float64 with torch's FP8
casts, for several recipes. Inputs: q, k, v from N(0, 1) (or with outliers: 0.1% of entries 50x),
quantized to e4m3 with per-tensor scales from their amax (448 / amax), D 128, S keys, one head;
dO from N(0, 1) in float64. The reference is float64 autograd on the dequantized q, k, v with the
unquantized dO; each recipe's dq, dk, dv are compared with it (relative L2). Every recipe uses
P rounded to e4m3 after scale_s 448 for dV, as the FP8 forward rounds it, and:

  O     the forward's stored output, which delta reads: e4m3 scaled by its amax, or bf16
        (attnc's FP8 forward may store a bf16 O; cuDNN's on Hopper may not)
  dO    the incoming gradient's storage: e5m2 or e4m3 scaled by its amax, or bf16
  dS    rounded before dQ and dK: e5m2 or e4m3 scaled by its amax (cuDNN's amax_dP), or not
  out   the gradients' storage: e4m3 scaled by their amax (cuDNN on Hopper), or bf16

The scales are the ideal current ones (amax of this very tensor); a training loop's delayed
scaling (last step's amax) can only do worse.
"""
import argparse, math, warnings

import torch

warnings.filterwarnings("ignore")
F8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def quant(x, kind):
    """x stored as kind, scaled by its amax; returned as the value it stands for."""
    if kind == "f64":
        return x
    if kind == "bf16":
        return x.to(torch.bfloat16).to(torch.float64)
    dt, top = F8[kind]
    amax = x.abs().max().item()
    s = top / amax if amax > 0 else 1.0
    return (x * s).to(dt).to(torch.float64) / s


def inputs(S, D, outliers, gen):
    xs = []
    for _ in range(3):
        x = torch.randn(S, D, dtype=torch.float64, generator=gen)
        if outliers:
            m = torch.rand(S, D, generator=gen) < 0.001
            x[m] *= 50
        xs.append(quant(x, "e4m3"))
    return xs


def reference(q, k, v, do, causal, scale):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ v
    o.backward(do)
    return q.grad, k.grad, v.grad


def recipe(q, k, v, do, causal, scale, o_kind, do_kind, ds_kind, out_kind):
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - lse)
    pr = (p * 448).to(torch.float8_e4m3fn).to(torch.float64) / 448  # P as P V reads it
    o = quant(pr @ v, o_kind)                                          # the stored O
    dov = quant(do, do_kind)
    dv = pr.T @ dov
    dp = dov @ v.T
    delta = (dov * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    ds = quant(ds, ds_kind)
    dq = (ds @ k) * scale
    dk = (ds.T @ q) * scale
    return quant(dq, out_kind), quant(dk, out_kind), quant(dv, out_kind)


RECIPES = [  # (name, O, dO, dS, out)
    ("cuDNN's: O e4m3, dO e5m2, dS e5m2, out e4m3", "e4m3", "e5m2", "e5m2", "e4m3"),
    ("O e4m3, dO e5m2, dS e4m3, out e4m3", "e4m3", "e5m2", "e4m3", "e4m3"),
    ("O e4m3, dO e5m2, dS e5m2, out bf16", "e4m3", "e5m2", "e5m2", "bf16"),
    ("O e4m3, dO e4m3, dS e4m3, out bf16", "e4m3", "e4m3", "e4m3", "bf16"),
    ("O bf16, dO e4m3, dS e4m3, out bf16", "bf16", "e4m3", "e4m3", "bf16"),
    ("O bf16, dO bf16, dS e4m3, out bf16", "bf16", "bf16", "e4m3", "bf16"),
    ("O bf16, dO bf16, dS not rounded, out bf16", "bf16", "bf16", "f64", "bf16"),
]


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--keys", type=int, default=1024)
    a = ap.parse_args()
    D, S = a.dim, a.keys
    scale = 1 / math.sqrt(D)
    print(f"D {D}, S {S}, {a.trials} trials: relative L2 of dq / dk / dv against float64")
    print("| inputs | mask | recipe | dq | dk | dv |")
    print("|---|---|---|---|---|---|")
    for outliers in (False, True):
        for causal in (False, True):
            errs = {name: [[], [], []] for name, *_ in RECIPES}
            gen = torch.Generator().manual_seed(1)
            for _ in range(a.trials):
                q, k, v = inputs(S, D, outliers, gen)
                do = torch.randn(S, D, dtype=torch.float64, generator=gen)
                want = reference(q, k, v, do, causal, scale)
                for name, *kinds in RECIPES:
                    got = recipe(q, k, v, do, causal, scale, *kinds)
                    for x in range(3):
                        errs[name][x].append(rel(got[x], want[x]))
            for name, e in errs.items():
                cells = " | ".join(f"{sum(x) / len(x):.4f}" for x in e)
                print(f"| {'outliers' if outliers else 'Gaussian'} | "
                      f"{'causal' if causal else 'none'} | {name} | {cells} |")


if __name__ == "__main__":
    main()
