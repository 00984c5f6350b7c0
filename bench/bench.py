"""bench.py: attnc against cuDNN (PyTorch SDPA) in one process, on the same tensors.

Runs on the GPU machine: python3 bench/bench.py [--lib build/libattn.so] [--out DIR] [--quick]
attnc kernels are compiled from .attn text through libattn (ctypes) and launched on PyTorch's
current stream in PyTorch's (primary) context. Every configuration is checked against SDPA
before it is timed. Times: CUDA events around a batch of launches (so launch overhead is
amortized the same way for both sides), rotating among three input sets so that no run reads
inputs left in L2 by the previous one; the median over repetitions.

FLOPs: 4*B*H*S*S*D forward, halved when causal (the anchors' convention).
"""
import argparse, ctypes, json, math, os, statistics, sys, tempfile, time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ATTN_BF16 = 2


class Attn:
    """The few libattn calls the benchmark needs, through ctypes."""

    def __init__(self, path):
        L = ctypes.CDLL(path)
        P = ctypes.POINTER
        vp = ctypes.c_void_p
        L.attn_context_create.argtypes = [P(vp)]
        L.attn_context_error.argtypes = [vp]
        L.attn_context_error.restype = ctypes.c_char_p
        L.attn_context_set_cache_dir.argtypes = [vp, ctypes.c_char_p]
        L.attn_module_compile_string.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, P(vp)]
        L.attn_module_get_graph.argtypes = [vp, ctypes.c_char_p, P(vp)]
        L.attn_module_destroy.argtypes = [vp]
        L.attn_call_create.argtypes = [vp, P(vp)]
        L.attn_call_destroy.argtypes = [vp]
        L.attn_call_bind_tensor.argtypes = [vp, ctypes.c_char_p, vp, ctypes.c_int, ctypes.c_int,
                                            P(ctypes.c_int64), P(ctypes.c_int64)]
        L.attn_call_launch.argtypes = [vp, vp]
        L.attn_context_destroy.argtypes = [vp]
        self.L = L
        self.ctx = vp()
        self.check(L.attn_context_create(ctypes.byref(self.ctx)), "attn_context_create")

    def check(self, status, what):
        if status != 0:
            msg = self.L.attn_context_error(self.ctx) if self.ctx else b""
            raise RuntimeError(f"{what}: status {status}: {(msg or b'').decode()}")

    def set_cache_dir(self, d):
        self.check(self.L.attn_context_set_cache_dir(self.ctx, d.encode() if d else None), "set_cache_dir")

    def compile(self, name, text):
        mod = ctypes.c_void_p()
        b = text.encode()
        self.check(self.L.attn_module_compile_string(self.ctx, name.encode(), b, len(b), ctypes.byref(mod)),
                   "compile")
        return mod

    def call(self, mod, graph, tensors):
        g = ctypes.c_void_p()
        self.check(self.L.attn_module_get_graph(mod, graph.encode(), ctypes.byref(g)), "get_graph")
        c = ctypes.c_void_p()
        self.check(self.L.attn_call_create(g, ctypes.byref(c)), "call_create")
        for name, t in tensors.items():
            shape = (ctypes.c_int64 * t.dim())(*t.shape)
            strides = (ctypes.c_int64 * t.dim())(*t.stride())
            self.check(self.L.attn_call_bind_tensor(c, name.encode(), ctypes.c_void_p(t.data_ptr()), ATTN_BF16,
                                                    t.dim(), shape, strides), f"bind {name}")
        return c

    def launch(self, call):
        self.check(self.L.attn_call_launch(call, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                   "launch")


def graph_text(D, causal):
    mask = "    s = mask(s, j <= i);\n" if causal else ""
    return (f"attention fwd {{\n"
            f"    input q : bf16[B, H, S, {D}];\n    input k : bf16[B, H, S, {D}];\n"
            f"    input v : bf16[B, H, S, {D}];\n    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = (q @ k^T) * scale;\n{mask}    o = softmax(s) @ v;\n"
            f"    output o : bf16[B, H, S, {D}];\n}}\n")


def time_batches(launches, reps=15, per_batch=6):
    """Median per-launch milliseconds; `launches` is a list rotated through."""
    for f in launches:  # warm-up
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for n in range(per_batch):
            launches[n % len(launches)]()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / per_batch)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="one shape per head dim")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="1024,4096,16384")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.cuda.init()
    attn = Attn(os.path.abspath(args.lib))
    dev = torch.cuda.get_device_name()
    rows, compile_rows = [], []
    seqs = [int(s) for s in args.seqs.split(",")]
    if args.quick:
        seqs = seqs[1:2]
    for D in [int(d) for d in args.dims.split(",")]:
        H = 2048 // D
        for causal in (False, True):
            text = graph_text(D, causal)
            # Cold: a fresh cache directory, so NVRTC compiles. Warm: a new context on the same
            # directory, so the cubin comes from disk (what a second process sees).
            cache = tempfile.mkdtemp(prefix="attnc-bench-")
            attn.set_cache_dir(cache)
            t0 = time.perf_counter()
            mod = attn.compile("fwd", text)
            cold = time.perf_counter() - t0
            warm_ctx = Attn(os.path.abspath(args.lib))
            warm_ctx.set_cache_dir(cache)
            t0 = time.perf_counter()
            wmod = warm_ctx.compile("fwd", text)
            warm = time.perf_counter() - t0
            warm_ctx.L.attn_module_destroy(wmod)
            compile_rows.append(dict(D=D, causal=causal, cold_ms=cold * 1e3, warm_ms=warm * 1e3))
            for S in seqs:
                B = max(1, 16384 // S)
                sets = []
                for _ in range(3):
                    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                    o = torch.empty_like(q)
                    sets.append((q, k, v, o, attn.call(mod, "fwd", dict(q=q, k=k, v=v, o=o))))
                q, k, v, o, c = sets[0]
                attn.launch(c)
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.cuda.synchronize()
                err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                t_attnc = time_batches([lambda c=c: attn.launch(c) for *_, c in sets])
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    t_cudnn = time_batches([lambda s=s: F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=causal)
                                            for s in sets])
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    t_fa2 = time_batches([lambda s=s: F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=causal)
                                          for s in sets])
                flops = 4 * B * H * S * S * D / (2 if causal else 1)
                row = dict(D=D, S=S, B=B, H=H, causal=causal, rel_err_vs_cudnn=err,
                           attnc_ms=t_attnc, cudnn_ms=t_cudnn, fa2_ms=t_fa2,
                           attnc_tflops=flops / t_attnc / 1e9, cudnn_tflops=flops / t_cudnn / 1e9,
                           fa2_tflops=flops / t_fa2 / 1e9, ratio=t_cudnn / t_attnc)
                rows.append(row)
                print(json.dumps(row), flush=True)
                for *_, c in sets:
                    attn.L.attn_call_destroy(c)
                del sets
            attn.L.attn_module_destroy(mod)
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    lines = [f"GPU: {dev}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; "
             f"CUDA {torch.version.cuda}; {time.strftime('%Y-%m-%d')}", "",
             "| D | S | causal | attnc TFLOP/s | cuDNN TFLOP/s | FA2 TFLOP/s | attnc / cuDNN | rel err vs cuDNN |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['D']} | {r['S']} | {'yes' if r['causal'] else 'no'} | {r['attnc_tflops']:.0f} | "
                     f"{r['cudnn_tflops']:.0f} | {r['fa2_tflops']:.0f} | {r['ratio']:.2f} | {r['rel_err_vs_cudnn']:.1e} |")
    lines += ["", f"Geometric mean attnc / cuDNN: {geo:.3f}", "",
              "| D | causal | cold NVRTC compile ms | warm cache load ms |", "|---|---|---|---|"]
    for r in compile_rows:
        lines.append(f"| {r['D']} | {'yes' if r['causal'] else 'no'} | {r['cold_ms']:.0f} | {r['warm_ms']:.1f} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(dict(rows=rows, compile=compile_rows, device=dev), f, indent=1)


if __name__ == "__main__":
    main()
