"""python_overhead.py: what a call through the attnc package costs on the host, beside
the raw libattn launch and torch's SDPA, on a shape small enough that the host side
dominates (B 1, H 8, S 128, D 64, causal) and on one where the kernel does (B 4, H 16,
S 4096, D 128).

    python3 bench/python_overhead.py [--lib build/libattn.so] [--out DIR]

Per call: wall time of 300 calls queued back to back, then a sync, divided by 300
(the median of 5 such runs), so it is max(host cost, GPU time) per call.
"""
import argparse, os, statistics, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def per_call_us(fn, n=300, runs=5):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    os.environ.setdefault("ATTN_LIBRARY", os.path.abspath(args.lib))
    import attnc
    lines = [f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
             f"{time.strftime('%Y-%m-%d')}", "",
             "| shape | attnc op g(q, k, v) us | raw Call.launch us | torch SDPA (cuDNN) us |",
             "|---|---|---|---|"]
    for B, H, S, D in ((1, 8, 128, 64), (4, 16, 4096, 128)):
        text = (f"attention causal {{ input q : bf16[B, H, S, {D}]; input k : bf16[B, H, S, {D}];"
                f" input v : bf16[B, H, S, {D}]; scalar scale : f32 = 1.0 / sqrt({D}.0);"
                f" o = softmax(mask((q @ k^T) * scale, j <= i)) @ v;"
                f" output o : bf16[B, H, S, {D}]; }}")
        g = attnc.compile(text).causal
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        call = g.raw.call()
        call.bind(q=q, k=k, v=v, o=o)
        stream = torch.cuda.current_stream().cuda_stream
        with torch.no_grad():
            op = per_call_us(lambda: g(q, k, v))
            raw = per_call_us(lambda: call.launch(stream))
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                sdpa = per_call_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
            err = ((g(q, k, v).float() - ref).norm() / ref.norm()).item()
        call.close()
        lines.append(f"| B{B} H{H} S{S} D{D} (rel err {err:.1e}) | {op:.1f} | {raw:.1f} | {sdpa:.1f} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench-python-overhead.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
