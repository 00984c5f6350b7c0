"""fp8_p_rounding_model.py: how rounding P to e4m3 moves O's error, in float64 on the CPU.

Runs anywhere PyTorch runs (no GPU): python3 bench/fp8_p_rounding_model.py [--trials N]

The same inputs as bench/fp8.py's error table (e4m3 q, k, v from N(0, 1), D 128, the first 128
query rows against 1024 keys, causal or not; O stored as e4m3, scale 1), and P rounded to e4m3
after scaling by 448 (scale_s) in the flash form P = exp(s - m), in four ways:
- exact max m, row sum of the unrounded P (what cuDNN's FP8 SDPA measures like: the table in
  bench/RESULTS.md "Session 19" has cuDNN at 0.0364 non-causal and 0.0306 causal, D 128 S 1k);
- exact max, row sum of the rounded P;
- the max snapped up to an integer in base 2 (attnc's kernels: every rescale of an online
  softmax is then a power of two, exact in e4m3, so the CPU reference reproduces the kernels'
  roundings; docs/language.md "FP8"), sum unrounded (attnc today) or rounded;
- P not rounded (f16: the "P f16" graphs).
Prints the relative L2 error of O against float64 attention on the same (dequantized) inputs.
"""
import argparse, math, warnings

import torch

warnings.filterwarnings("ignore")


def e4(x):
    return x.to(torch.float8_e4m3fn).to(torch.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--keys", type=int, default=1024)
    args = ap.parse_args()
    torch.manual_seed(0)
    D, S, R = args.dim, args.keys, 128
    for causal in (False, True):
        errs = {}
        for _ in range(args.trials):
            q, k, v = (e4(torch.randn(S, D, dtype=torch.float64)) for _ in range(3))
            s = (q[:R] @ k.T) / math.sqrt(D)
            if causal:
                s = s.masked_fill(torch.arange(S)[None, :] > torch.arange(R)[:, None], float("-inf"))
            ref = torch.softmax(s, -1) @ v
            m = s.max(-1, keepdim=True).values
            m_snap = torch.ceil(m * math.log2(math.e)) / math.log2(math.e)
            for name, mm, rounded_sum in (("exact max, sum unrounded (cuDNN-like)", m, False),
                                          ("exact max, sum rounded", m, True),
                                          ("snapped max, sum unrounded (attnc)", m_snap, False),
                                          ("snapped max, sum rounded", m_snap, True),
                                          ("P not rounded (f16)", m, None)):
                p = torch.exp(s - mm)
                pq = p if rounded_sum is None else e4(p * 448) / 448
                l = (pq if rounded_sum else p).sum(-1, keepdim=True)
                o = e4((pq @ v) / l)
                errs.setdefault(name, []).append(((o - ref).norm() / ref.norm()).item())
        print("causal" if causal else "non-causal")
        for name, x in errs.items():
            print(f"  {name}: relative L2 {sum(x) / len(x):.4f}")


if __name__ == "__main__":
    main()
