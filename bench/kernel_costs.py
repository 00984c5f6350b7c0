#!/usr/bin/env python3
"""Per-variant cost of score modifications, for profiling fwd_sm90.

(Not named profile.py: bench.py runs with bench/ first on sys.path, and a
profile.py there shadows the standard library module torch.compile imports.)

Two modes, one set of graphs (D 128, B 4, H 16, S 4096 unless named):
  python3 bench/kernel_costs.py --lib build/libattn.so           # time each graph (median ms)
  ncu ... python3 bench/kernel_costs.py --lib ... --once         # launch each graph once, for ncu

The graphs isolate one per-element cost each, so differences of their
times say what a modification costs: e.g. `alibi` against `alibi_float`
(the same math with the integer distance converted per index instead of
per element) isolates the int-to-float conversion, and `softcap` against
`plain` the tanh.
"""
import argparse, math, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, time_batches  # noqa: E402

CAUSAL = "    s = mask(s, j <= i);\n"
BODIES = {
    "plain": "",
    "causal": CAUSAL,
    "softcap": "    s = 30.0 * tanh(s / 30.0);\n",
    "alibi": "    s = s - slopes[h] * (i - j);\n" + CAUSAL,
    "alibi_float": "    s = s - slopes[h] * (f32(i) - f32(j));\n" + CAUSAL,
    "alibi_const": "    s = s - 0.01 * (i - j);\n" + CAUSAL,
    "bias_ij_free": "    s = s + 0.0 * slopes[h];\n" + CAUSAL,
    # bench.py's document variant: 8 documents packed along the sequence.
    "document": "    s = mask(s, doc[b, i] == doc[b, j]);\n",
    # Dropout's forward cost (bench.py measures it beside the backward too).
    "dropout": "",
}
SHAPES = {  # name: (B, H, S, D, body)
    **{k: (4, 16, 4096, 128, v) for k, v in BODIES.items()},
    "d64_s1k_causal": (16, 32, 1024, 64, CAUSAL),
    "d64_s1k": (16, 32, 1024, 64, ""),
    "d64_s4k": (4, 32, 4096, 64, ""),
    "d256_s4k": (4, 8, 4096, 256, ""),
    "d256_s4k_causal": (4, 8, 4096, 256, CAUSAL),
    # The document mask's costs apart: documents cut on 128-key boundaries
    # (every live tile full), and plain attention on short rows (as many
    # work tiles, a few key tiles each).
    "document_aligned": (4, 16, 4096, 128, BODIES["document"]),
    "plain_s512": (32, 16, 512, 128, ""),
}


def text(name, D, body):
    decl = "    input slopes : f32[H];\n" if "slopes" in body else ""
    decl += "    input doc : i32[B, S];\n" if "doc[" in body else ""
    decl += "    scalar seed : u64 = 1234;\n" if name == "dropout" else ""
    p = "dropout(softmax(s), 0.1, seed, 0)" if name == "dropout" else "softmax(s)"
    return (f"attention {name} {{\n    input q : bf16[B, H, S, {D}];\n    input k : bf16[B, H, S, {D}];\n"
            f"    input v : bf16[B, H, S, {D}];\n{decl}    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = (q @ k^T) * scale;\n{body}    o = {p} @ v;\n"
            f"    output o : bf16[B, H, S, {D}];\n}}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--once", action="store_true", help="one launch per graph (under ncu)")
    ap.add_argument("--tiles", action="store_true", help="also count the key tiles each graph loads")
    ap.add_argument("--only", default="", help="comma-separated graph names")
    ap.add_argument("--sched", default="",
                    help="compare ATTN_SM90_VARIANT values (comma-separated) on the grid's shapes, with cuDNN")
    ap.add_argument("--backward", action="store_true",
                    help="the backward of BWD_SHAPES instead (with --once: for ncu)")
    ap.add_argument("--cudnn", action="store_true", help="with --backward --once: cuDNN's instead")
    args = ap.parse_args()
    torch.zeros(1, device="cuda")  # a current context before libattn compiles
    attn = Attn(args.lib)
    if args.sched:
        return run_sched(attn, args.sched.split(","))
    if args.backward:
        return run_backward_costs(attn, args)
    names = [n for n in SHAPES if not args.only or n in args.only.split(",")]
    base = {}
    for name in names:
        B, H, S, D, body = SHAPES[name]
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        t = dict(q=q, k=k, v=v, o=o)
        if "slopes" in body:
            t["slopes"] = torch.tensor([2.0 ** (-8.0 * (n + 1) / H) for n in range(H)], device="cuda")
        if "doc[" in body:
            g = torch.Generator().manual_seed(0)
            t["doc"] = torch.zeros(B, S, dtype=torch.int32, device="cuda")
            cuts = torch.randint(1, S, (7,), generator=g)
            if name.endswith("_aligned"):
                cuts = (cuts // 128).clamp(min=1) * 128
            for c in sorted(cuts.tolist()):
                t["doc"][:, c:] += 1
        call = attn.call(attn.compile(name, text(name, D, body)), name, t)
        if args.once:
            attn.launch(call)
            torch.cuda.synchronize()
            continue
        if args.tiles:  # key tiles the kernel loaded, of all (BM 128, BN 128 at D <= 128)
            counter = torch.zeros(1, dtype=torch.int64, device="cuda")
            call.set_tile_counter(counter.data_ptr())
            attn.launch(call)
            torch.cuda.synchronize()
            call.set_tile_counter(0)
            total = B * H * ((S + 127) // 128) ** 2
            print(f"{name}: key tiles loaded {counter.item()} of {total} ({counter.item() / total:.3f})")
        ms = time_batches([lambda: attn.launch(call)], reps=21)
        flops = 4 * B * H * S * S * D / (2 if "j <= i" in body else 1)
        base[name] = ms
        print(f"| {name} | {B}x{H}x{S} D{D} | {ms:.3f} ms | {flops / ms / 1e9:.0f} TFLOP/s |", flush=True)
    if not args.once:
        for a, b in (("softcap", "plain"), ("alibi", "causal"), ("alibi_float", "causal"),
                     ("alibi_const", "causal"), ("bias_ij_free", "causal"), ("alibi", "alibi_float")):
            if a in base and b in base:
                print(f"{a} over {b}: {100 * (base[a] / base[b] - 1):+.1f}%")


BWD_SHAPES = {  # name: (B, H, S, D, causal, dropout), bench.py's backward graphs
    "bwd_d64": (4, 32, 4096, 64, False, False),
    "bwd_d128": (4, 16, 4096, 128, False, False),
    "bwd_d128_causal": (4, 16, 4096, 128, True, False),
    "bwd_d128_dropout": (4, 16, 4096, 128, False, True),
    "bwd_d64_dropout": (4, 32, 4096, 64, False, True),
    "bwd_d256": (4, 8, 4096, 256, False, False),
}


def run_backward_costs(attn, args):
    """The whole backward (delta pre-pass, main kernel, dQ convert) of each graph, median ms."""
    from bench import backward_graph_text, backward_sets
    for name, (B, H, S, D, causal, dropout) in BWD_SHAPES.items():
        if args.only and name not in args.only.split(","):
            continue
        if args.cudnn:  # cuDNN's backward of the same shape instead, once (for ncu)
            import torch.nn.functional as F
            from torch.nn.attention import SDPBackend, sdpa_kernel
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                     dropout_p=0.1 if dropout else 0.0)
                out.backward(torch.randn_like(out))
            torch.cuda.synchronize()
            continue
        mod = attn.compile(name, backward_graph_text(D, causal, dropout))
        sets = backward_sets(attn, mod, B, H, S, D, n=1 if args.once else 3)
        if args.once:
            attn.launch_backward(sets[0][-1])
            torch.cuda.synchronize()
            continue
        ms = time_batches([lambda c=s[-1]: attn.launch_backward(c) for s in sets], reps=21)
        flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
        print(f"| {name} | {B}x{H}x{S} D{D} | {ms:.3f} ms | {flops / ms / 1e9:.0f} TFLOP/s |", flush=True)


SCHED_SHAPES = [(D, S, c) for D in (64, 128, 256) for S in (1024, 2048, 4096, 16384) for c in (False, True)]


def run_sched(attn, variants):
    """Each fwd_sm90 variant (ATTN_OPTION_SM90_VARIANT, applied when a graph is compiled) against
    cuDNN, same tensors."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    print("| D | S | causal | cuDNN ms | " + " | ".join(f"{v} ms (x cuDNN)" for v in variants) + " |")
    logs = {v: [] for v in variants}
    for D, S, causal in SCHED_SHAPES:
        B, H = max(1, 16384 // S), 2048 // D
        body = CAUSAL if causal else ""
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            t_ref = time_batches([lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)])
        cells = []
        for var in variants:
            attn.set_sm90_variant(var)
            name = f"g_{var}_{D}_{S}_{int(causal)}"
            call = attn.call(attn.compile(name, text(name, D, body)), name, dict(q=q, k=k, v=v, o=o))
            o.fill_(float("nan"))
            attn.launch(call)
            torch.cuda.synchronize()
            err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = time_batches([lambda: attn.launch(call)])
            # The last of many launches (a persistent kernel's queue reused) is right too.
            o.fill_(float("nan"))
            attn.launch(call)
            torch.cuda.synchronize()
            err = max(err, ((o.float() - ref.float()).norm() / ref.float().norm()).item())
            logs[var].append(t_ref / ms)
            cells.append(f"{ms:.3f} ({t_ref / ms:.2f}){' ERR %.1e' % err if not err < 2e-2 else ''}")
            call.close()
        attn.set_sm90_variant("auto")
        print(f"| {D} | {S} | {causal} | {t_ref:.3f} | " + " | ".join(cells) + " |", flush=True)
    for var, r in logs.items():
        print(f"{var}: geomean x cuDNN {math.exp(sum(map(math.log, r)) / len(r)):.3f}, lowest {min(r):.2f}")


if __name__ == "__main__":
    main()
