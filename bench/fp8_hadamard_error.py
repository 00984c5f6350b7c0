"""fp8_hadamard_error.py: what rotating q and k (and v) by a Hadamard matrix before quantizing to
e4m3 does to the error of attnc's FP8 attention, in float64 on the CPU.

Runs anywhere PyTorch runs (no GPU): python3 bench/fp8_hadamard_error.py [--trials N]

The model is examples/fp8_full.attn's graph as docs/language.md "FP8" defines it, which attnc's
CPU reference and kernels reproduce: q, k, v quantized per tensor (attnc.quantize_fp8: descale =
amax / 448), scores (q8 k8^T) * scale * descale_q * descale_k, P rounded to e4m3 after * 448 in
the flash form with the row max snapped up to an integer in base 2 and the row sum unrounded,
O = (P8 v8) * descale_v / 448 / L, kept in f32 (a bf16/f32 output; an e4m3 O adds its own
rounding on top). Error: relative L2 of O against float64 attention on the ORIGINAL (unquantized)
q, k, v, so input quantization is part of it. Rotations (attnc.hadamard, along the head dim):
none; q and k (the scores are unchanged, only their quantization); q, k and v (O's rotation
undone in float64 afterwards). Inputs, [S, D] each, D 128, the first 256 query rows against
1024 keys, causal or not:
- gaussian: N(0, 1);
- element outliers: N(0, 1) plus, at 0.1% of the entries, N(0, 50^2);
- channel outliers: N(0, 1) with 4 of the 128 head-dim channels of q and k scaled by 20 (the
  pattern LLM activations show, which the rotation is for).
"""
import argparse, math, os, sys, warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import attnc  # noqa: E402  (hadamard and quantize_fp8 need no libattn)

warnings.filterwarnings("ignore")
LOG2E = 1.0 / math.log(2.0)


def e4(x):
    return x.to(torch.float8_e4m3fn).to(torch.float64)


def fp8_attention(q, k, v, causal):
    """attnc's FP8 graph on float64 q, k, v [S, D] (q: the query rows), O in f32."""
    q8, dq = attnc.quantize_fp8(q)
    k8, dk = attnc.quantize_fp8(k)
    v8, dv = attnc.quantize_fp8(v)
    q8, k8, v8 = (x.to(torch.float64) for x in (q8, k8, v8))
    s = (q8 @ k8.T) * (float(torch.tensor(1.0 / math.sqrt(q.shape[1]), dtype=torch.float32)) * dq * dk)
    s = mask(s, causal)
    m = torch.ceil((s * LOG2E).max(-1, keepdim=True).values)  # the snapped row max, base 2
    pt = torch.exp2(s * LOG2E - m)
    l = pt.sum(-1, keepdim=True)
    return ((e4(pt * 448.0) @ v8) * (dv / 448.0) / l).to(torch.float32).to(torch.float64)


def mask(s, causal):
    if not causal:
        return s
    r, c = s.shape
    return s.masked_fill(torch.arange(c)[None, :] > torch.arange(r)[:, None] + (c - r), float("-inf"))


def inputs(kind, S, D, g):
    q, k, v = (torch.randn(S, D, generator=g, dtype=torch.float64) for _ in range(3))
    if kind == "element outliers":
        for x in (q, k, v):
            hit = torch.rand(S, D, generator=g, dtype=torch.float64) < 1e-3
            x += hit * torch.randn(S, D, generator=g, dtype=torch.float64) * 50
    elif kind == "channel outliers":
        ch = torch.randperm(D, generator=g)[:4]
        q[:, ch] *= 20
        k[:, ch] *= 20
    return q, k, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=12)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    S, D, R = 1024, 128, 256
    h = attnc.hadamard(D, dtype=torch.float64)
    print("| inputs | causal | no rotation | q, k rotated | q, k, v rotated | q, k rotated / none |")
    print("|---|---|---|---|---|---|")
    for kind in ("gaussian", "element outliers", "channel outliers"):
        for causal in (False, True):
            err = {"none": [], "qk": [], "qkv": []}
            for _ in range(args.trials):
                q, k, v = inputs(kind, S, D, g)
                q = q[-R:]  # the last rows: causal bottom-right, each row sees many keys
                s = mask((q @ k.T) / math.sqrt(D), causal)
                ref = torch.softmax(s, -1) @ v
                rel = lambda o: ((o - ref).norm() / ref.norm()).item()
                err["none"].append(rel(fp8_attention(q, k, v, causal)))
                err["qk"].append(rel(fp8_attention(q @ h, k @ h, v, causal)))
                err["qkv"].append(rel(fp8_attention(q @ h, k @ h, v @ h, causal) @ h.T))
            m = {n: sum(x) / len(x) for n, x in err.items()}
            print(f"| {kind} | {'yes' if causal else 'no'} | {m['none']:.4f} | {m['qk']:.4f} | "
                  f"{m['qkv']:.4f} | {m['qk'] / m['none']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
