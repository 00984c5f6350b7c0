"""sdpa_once.py: a few launches of torch SDPA's cuDNN forward at one grid shape, for a profiler.

    python3 bench/sdpa_once.py [--dim 128] [--seq 1024] [--causal] [--launches 3]

B*S = 16384 and H = 2048/D as in bench/bench.py's grid, bf16, [B, H, S, D]. Nothing is timed or
checked here: tools/ncu_stalls.sh wraps it to read cuDNN's kernel beside attnc's at the same shape
(device_check.sh FIRST_S37_NCU).
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args()
    B, H = max(1, 16384 // a.seq), 2048 // a.dim
    q, k, v = (torch.randn(B, H, a.seq, a.dim, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for _ in range(a.launches):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
    torch.cuda.synchronize()
    print(f"sdpa_once: cuDNN forward, B {B} H {H} S {a.seq} D {a.dim} causal {a.causal}, "
          f"{a.launches} launches")


if __name__ == "__main__":
    main()
