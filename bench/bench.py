"""bench.py: attnc against cuDNN (PyTorch SDPA) in one process, on the same tensors.

Runs on the GPU machine: python3 bench/bench.py [--lib build/libattn.so] [--out DIR] [--quick]
attnc kernels are compiled from .attn text through the attnc package (python/attnc) and launched on PyTorch's
current stream in PyTorch's (primary) context. Every configuration is checked against SDPA
before it is timed. Times: CUDA events around a batch of launches (so launch overhead is
amortized the same way for both sides), rotating among three input sets so that no run reads
inputs left in L2 by the previous one; the median over repetitions.

FLOPs: 4*B*H*S*S*D forward, halved when causal (the anchors' convention).

--fa4 DIR (default $ATTN_FA4): FlashAttention-4's precompiled Hopper kernels (bench/fa4_peer.py,
the .fa4 bundle unpacked at DIR) timed on the same tensors in the grid and the backward table.

--backward: the backward alone (attn_call_launch_backward against cuDNN's backward through
autograd on SDPA, the forward's outputs kept), D 64/128 x S 1k/4k/16k x causal, B*S = 16384,
H = 2048/D, FLOPs = 2.5 x the forward's; plus attnc rows with and without dropout (rate 0.1) and
with and without deterministic mode at D 128, S 4k.
"""
import argparse, json, math, os, statistics, sys, tempfile, time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The attnc package of this checkout (python/attnc), over the libattn that --lib names.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
SM90_VARIANTS = ["auto", "base", "persist", "bn80", "persist_bn80", "f16_pv", "wg3", "kv8_early",
                 "kv_copy", "bn176", "fp8_vt8", "kv8", "bn128", "rescale_late", "pv_overlap", "pv_once", "q_early", "auto35", "tanh_poly", "auto36", "partial_first", "ring_closed", "q_before_v", "pv_wait_next", "o_smem",
                 "o_regs"]  # (tmpl_sm90.c's order: the option takes the index)


def checked_variant(ap, name):
    """name, where SM90_VARIANTS has it; else argparse's error for a --variant option
    (set_sm90_variant would take auto for it and mislabel the table)."""
    if name not in SM90_VARIANTS:
        ap.error(f"--variant: {name} (known: {', '.join(SM90_VARIANTS)})")
    return name


class Attn:
    """What the benchmarks need of libattn, through the attnc package's
    low-level layer (attnc.Context, RawModule, Call): one context, modules
    compiled from text, calls bound to torch tensors and launched on
    PyTorch's current stream."""

    def __init__(self, path):
        os.environ.setdefault("ATTN_LIBRARY", path)
        import attnc
        self.attnc = attnc
        self.ctx = attnc.Context()
        # The tuning knobs' environment variables, as the attnc command reads them
        # (the library takes them as context options only).
        self.set_sm90_variant(os.environ.get("ATTN_SM90_VARIANT", "auto"))
        bwd = {"sm80": 80, "sm90": 90, "sm90f8": 91, "sm90stamps": 92, "sm90bm80": 93, "sm90bm80s": 94, "sm90bm80late": 95}.get(os.environ.get("ATTN_BWD_TEMPLATE", ""), 0)
        self.ctx.set_option("backward_template", bwd)
        # ATTN_LAUNCH_OVERLAP=0: plain launches (docs/runtime.md, "Launch overlap").
        self.ctx.set_option("launch_overlap", 0 if os.environ.get("ATTN_LAUNCH_OVERLAP") == "0" else 1)

    def set_sm90_variant(self, name):
        """fwd_sm90's variant for the modules compiled next (tmpl_sm90.c)."""
        self.ctx.set_option("sm90_variant", SM90_VARIANTS.index(name) if name in SM90_VARIANTS else 0)

    def set_option(self, name, value):
        self.ctx.set_option(name, value)

    def set_arch(self, arch):
        self.ctx.set_arch(arch)

    def set_cache_dir(self, d):
        self.ctx.set_cache_dir(d)

    def compile(self, name, text):
        return self.ctx.compile(text, name)

    def call(self, mod, graph, tensors):
        c = mod.graph(graph).call()
        c.bind(**tensors)
        return c

    @staticmethod
    def stream():
        return torch.cuda.current_stream().cuda_stream

    def launch(self, call):
        call.launch(self.stream())

    def bind(self, call, tensors):
        call.bind(**tensors)

    def launch_backward(self, call):
        call.launch_backward(self.stream())

    def set_deterministic(self, call, on):
        call.set_deterministic(on)


def timed_compile(args, text, cache_dir):
    """Seconds a fresh context takes to compile `text` with the cache directory cache_dir (None:
    no disk cache, and so no NVRTC cache either), and where the module came from."""
    ctx = Attn(os.path.abspath(args.lib))
    ctx.set_cache_dir(cache_dir)
    if args.arch:
        ctx.set_arch(args.arch)
    t0 = time.perf_counter()
    m = ctx.compile("fwd", text)
    secs = time.perf_counter() - t0
    kind = m.source_kind
    m.close()
    return secs, kind


def graph_text(D, causal, kv_type="bf16", kv_heads="H", name="fwd", alibi=False):
    """The grid's graph; k and v of another type (an FP8 cache) or with their own heads (GQA);
    alibi: slopes[h] * (i - j) subtracted from the score (an f32[H] input `slopes`)."""
    mask = "    s = mask(s, j <= i);\n" if causal else ""
    slopes = "    input slopes : f32[H];\n" if alibi else ""
    bias = "    s = s - slopes[h] * (i - j);\n" if alibi else ""
    return (f"attention {name} {{\n"
            f"    input q : bf16[B, H, S, {D}];\n    input k : {kv_type}[B, {kv_heads}, S, {D}];\n"
            f"    input v : {kv_type}[B, {kv_heads}, S, {D}];\n{slopes}"
            f"    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = (q @ k^T) * scale;\n{bias}{mask}    o = softmax(s) @ v;\n"
            f"    output o : bf16[B, H, S, {D}];\n}}\n")


def time_batches(launches, reps=15, per_batch=6):
    """Median per-launch milliseconds; `launches` is a list rotated through."""
    for f in launches:  # warm-up
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # The batch is queued behind a GPU sleep (~1 ms), so a peer whose Python glue costs more
        # host time per call than its kernel (FA4's, bench/fa4_peer.py) is timed on the GPU alone.
        torch.cuda._sleep(2_000_000)
        s.record()
        for n in range(per_batch):
            launches[n % len(launches)]()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / per_batch)
    return statistics.median(times)


def time_plain(attn, launches):
    """time_batches with launch overlap off (ATTN_OPTION_LAUNCH_OVERLAP 0): the same kernels
    launched plainly, so a row shows what the overlapped launches gain."""
    attn.set_option("launch_overlap", 0)
    try:
        return time_batches(launches)
    finally:
        attn.set_option("launch_overlap", 0 if os.environ.get("ATTN_LAUNCH_OVERLAP") == "0" else 1)


def overlap_summary(rows):
    """Overlapped launches against plain ones, per row: attnc_plain_ms / attnc_ms."""
    gains = [r["attnc_plain_ms"] / r["attnc_ms"] for r in rows if r.get("attnc_plain_ms")]
    if not gains:
        return []
    geo = math.exp(sum(math.log(g) for g in gains) / len(gains))
    return [f"Launch overlap: plain launches / overlapped, geometric mean {geo:.3f} "
            f"(range {min(gains):.3f}-{max(gains):.3f}; above 1: overlap faster).", ""]


def fa4_load(d):
    """bench/fa4_peer.py set up on the unpacked .fa4 bundle at d, or None (no bundle, or it fails
    to load: the reason is printed and the tables leave FA4's columns empty)."""
    if not d:
        return None
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import fa4_peer
        fa4_peer.setup(d)
        return fa4_peer
    except Exception as ex:  # a peer that does not load leaves attnc's own rows intact
        print(f"FA4 not loaded from {d}: {type(ex).__name__}: {ex}", flush=True)
        return None


def rel_err(a, b):
    """Relative L2 error of a against the reference b."""
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def fa4_forward_row(fa4, sets, ref, causal, flops, t_attnc):
    """FA4's inference forward on the grid's tensors (sets[i] = (q, k, v, ...), [B, H, S, D]):
    its error against cuDNN's output `ref` on the first set and its time; {} without FA4, the
    error message where FA4 refuses or fails."""
    if fa4 is None:
        return {}
    try:
        outs = [torch.empty_like(s[0]) for s in sets]
        fa4.fa4_forward(sets[0][0], sets[0][1], sets[0][2], causal, out=outs[0])
        torch.cuda.synchronize()
        err = rel_err(outs[0], ref)
        t = time_batches([lambda s=s, o=o: fa4.fa4_forward(s[0], s[1], s[2], causal, out=o)
                          for s, o in zip(sets, outs)])
        return dict(fa4_ms=t, fa4_tflops=flops / t / 1e9, ratio_fa4=t / t_attnc, rel_err_fa4=err)
    except Exception as ex:
        return dict(fa4_error=f"{type(ex).__name__}: {ex}"[:300])


def fa4_backward_row(fa4, sets, ref_grads, causal, flops, t_attnc):
    """FA4's backward alone (its training forward run once per set, outputs and LSE kept) on the
    backward table's tensors (sets[i] = (q, k, v, do, ...)); errors of dq, dk, dv against cuDNN's
    on the first set."""
    if fa4 is None:
        return {}
    try:
        runs = []
        for s in sets:
            o, lse = fa4.fa4_forward(s[0], s[1], s[2], causal, need_lse=True)
            runs.append((s[0], s[1], s[2], o, s[3], lse, *(torch.empty_like(s[0]) for _ in range(3))))
        bwd = lambda r: fa4.fa4_backward(r[0], r[1], r[2], r[3], r[4], r[5], causal, dq=r[6], dk=r[7], dv=r[8])
        bwd(runs[0])
        torch.cuda.synchronize()
        errs = [rel_err(a, b) for a, b in zip(runs[0][6:9], ref_grads)]
        t = time_batches([lambda r=r: bwd(r) for r in runs])
        return dict(fa4_ms=t, fa4_tflops=flops / t / 1e9, ratio_fa4=t / t_attnc, rel_err_fa4_dq=errs[0],
                    rel_err_fa4_dk=errs[1], rel_err_fa4_dv=errs[2])
    except Exception as ex:
        return dict(fa4_error=f"{type(ex).__name__}: {ex}"[:300])


def fa4_cells(r):
    """FA4's TFLOP/s and attnc / FA4 for a table row ('-' without FA4, 'error' where it failed)."""
    if "fa4_ms" in r:
        return f"{r['fa4_tflops']:.0f} | {r['ratio_fa4']:.2f}"
    return "error | -" if "fa4_error" in r else "- | -"


def fa4_summary(rows, what):
    """Geometric means against FA4 and against the faster of cuDNN and FA4 (issue 19's bar)."""
    rs = [r for r in rows if "fa4_ms" in r]
    if not rs:
        return []
    geo = math.exp(sum(math.log(r["ratio_fa4"]) for r in rs) / len(rs))
    best = [min(r["ratio"], r["ratio_fa4"]) for r in rs]
    geo_best = math.exp(sum(math.log(x) for x in best) / len(best))
    worst = min(zip(best, rs), key=lambda x: x[0])
    return [f"Geometric mean attnc / FA4 ({what}, {len(rs)} shapes): {geo:.3f}; attnc / the faster of "
            f"cuDNN and FA4: {geo_best:.3f}, lowest {worst[0]:.2f} (D {worst[1]['D']}, S {worst[1]['S']}, "
            f"causal {worst[1]['causal']})", ""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="one shape per head dim")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--arch", default=None, help="e.g. sm_90 to force the portable sm80 template on Hopper")
    ap.add_argument("--variants", action="store_true", help="custom variants against FlexAttention")
    ap.add_argument("--grid", action="store_true", default=None,
                    help="the plain grid (default unless --variants or --backward)")
    ap.add_argument("--backward", action="store_true", help="the backward against cuDNN's")
    ap.add_argument("--fa4", default=os.environ.get("ATTN_FA4", ""),
                    help="the unpacked .fa4 bundle (bench/fa4_peer.py): FA4 timed beside cuDNN")
    args = ap.parse_args()
    if args.grid is None:
        args.grid = not args.variants and not args.backward
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")  # makes PyTorch's primary context current for libattn
    attn = Attn(os.path.abspath(args.lib))
    if args.arch:
        attn.set_arch(args.arch)
    args.fa4_mod = fa4_load(args.fa4)
    dev = torch.cuda.get_device_name()
    rows, compile_rows = [], []
    seqs = [int(s) for s in args.seqs.split(",")]
    if args.quick:
        seqs = seqs[1:2]
    for D in ([int(d) for d in args.dims.split(",")] if args.grid else []):
        H = 2048 // D
        for causal in (False, True):
            text = graph_text(D, causal)
            # Cold: a context without a disk cache, which also turns off NVRTC's own cache (CUDA
            # 12.9+, kept across processes on a GPU machine: it served the "cold" compiles of
            # sessions 37-39 that read 66-80 ms, the same text having compiled earlier in the
            # call). Then the module again into a fresh cache directory, untimed, and warm: a new
            # context on that directory, so the cubin comes from disk (what a second process sees).
            cold, cold_from = timed_compile(args, text, None)
            cache = tempfile.mkdtemp(prefix="attnc-bench-")
            attn.set_cache_dir(cache)
            mod = attn.compile("fwd", text)
            warm, warm_from = timed_compile(args, text, cache)
            # Where each module came from ("nvrtc", "cache").
            compile_rows.append(dict(D=D, causal=causal, cold_ms=cold * 1e3, warm_ms=warm * 1e3,
                                     cold_from=cold_from, warm_from=warm_from))
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
                err = rel_err(o, ref)
                t_attnc = time_batches([lambda c=c: attn.launch(c) for *_, c in sets])
                t_plain = time_plain(attn, [lambda c=c: attn.launch(c) for *_, c in sets])
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    t_cudnn = time_batches([lambda s=s: F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=causal)
                                            for s in sets])
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    t_fa2 = time_batches([lambda s=s: F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=causal)
                                          for s in sets])
                flops = 4 * B * H * S * S * D / (2 if causal else 1)
                row = dict(D=D, S=S, B=B, H=H, causal=causal, rel_err_vs_cudnn=err,
                           attnc_ms=t_attnc, attnc_plain_ms=t_plain, cudnn_ms=t_cudnn, fa2_ms=t_fa2,
                           attnc_tflops=flops / t_attnc / 1e9, cudnn_tflops=flops / t_cudnn / 1e9,
                           fa2_tflops=flops / t_fa2 / 1e9, ratio=t_cudnn / t_attnc)
                row.update(fa4_forward_row(args.fa4_mod, sets, ref, causal, flops, t_attnc))
                rows.append(row)
                print(json.dumps(row), flush=True)
                for *_, c in sets:
                    c.close()
                del sets
            mod.close()
    variant_rows = run_variants(attn) if args.variants else []
    bwd_rows, bwd_extra = run_backward(attn, args) if args.backward else ([], [])
    lines = [f"GPU: {dev}; driver {driver_version()}; torch {torch.__version__}; "
             f"cuDNN {torch.backends.cudnn.version()}; CUDA {torch.version.cuda}; "
             f"attnc arch {args.arch or 'native'}; {time.strftime('%Y-%m-%d')}", ""]
    if rows:
        lines += grid_table(rows, compile_rows)
    if variant_rows:
        lines += variant_table(variant_rows)
    if bwd_rows or bwd_extra:
        lines += backward_table(bwd_rows, bwd_extra)
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    tag = ("backward" if args.backward and not args.grid and not args.variants
           else "variants" if args.variants else "grid") + (f"-{args.arch}" if args.arch else "")
    with open(os.path.join(args.out, f"bench-{tag}.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, f"bench-{tag}.json"), "w") as f:
        json.dump(dict(rows=rows, compile=compile_rows, variants=variant_rows, backward=bwd_rows,
                       backward_extra=bwd_extra, device=dev), f, indent=1)
    if rows:
        plot(rows, os.path.join(args.out, f"bench-{tag}.png"))


def backward_graph_text(D, causal, dropout=False):
    mask = "    s = mask(s, j <= i);\n" if causal else ""
    seed = "    scalar seed : u64 = 1234;\n" if dropout else ""
    p = "dropout(softmax(s), 0.1, seed, 0)" if dropout else "softmax(s)"
    return (f"attention bwd {{\n"
            f"    input q : bf16[B, H, S, {D}];\n    input k : bf16[B, H, S, {D}];\n"
            f"    input v : bf16[B, H, S, {D}];\n    scalar scale : f32 = 1.0 / sqrt({D}.0);\n{seed}"
            f"    s = (q @ k^T) * scale;\n{mask}    o = {p} @ v;\n"
            f"    output o : bf16[B, H, S, {D}];\n    output lse = logsumexp(s);\n"
            f"    grad q, k, v;\n}}\n")


def backward_sets(attn, mod, B, H, S, D, n=3):
    """n input sets, each with the forward run once (o and lse kept) and everything bound for
    the backward: (q, k, v, do, dq, dk, dv, call)."""
    sets = []
    for _ in range(n):
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        dq, dk, dv = (torch.empty_like(q) for _ in range(3))
        c = attn.call(mod, "bwd", dict(q=q, k=k, v=v, o=o, lse=lse))
        attn.launch(c)
        attn.bind(c, dict(do=do, dq=dq, dk=dk, dv=dv))
        sets.append((q, k, v, do, dq, dk, dv, o, lse, c))
    return sets


def cudnn_dropout_times(B, H, S, D, rate):
    """cuDNN's forward and backward ms (SDPA, non-causal) with dropout `rate`; None if refused."""
    try:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=rate)
            t_f = time_batches([fwd])
            out = fwd()
            t_b = time_batches([lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)])
        return t_f, t_b
    except RuntimeError as e:
        print(f"cuDNN with dropout {rate}: {e}", file=sys.stderr)
        return None, None


def run_backward(attn, args):
    rows, extra = [], []
    seqs = [1024, 4096, 16384] if not args.quick else [4096]
    for D in [int(d) for d in args.dims.split(",")]:
        H = 2048 // D
        for causal in (False, True):
            mod = attn.compile("bwd", backward_graph_text(D, causal))
            for S in seqs:
                B = max(1, 16384 // S)
                sets = backward_sets(attn, mod, B, H, S, D)
                q, k, v, do, dq, dk, dv, o, lse, c = sets[0]
                attn.launch_backward(c)
                # cuDNN: the forward once per set (outputs kept), then only the backward timed.
                ref_sets = []
                for s in sets:
                    tq, tk, tv = (x.detach().clone().requires_grad_(True) for x in s[:3])
                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                    ref_sets.append((tq, tk, tv, out, s[3]))
                tq, tk, tv, out, tdo = ref_sets[0]
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    gq, gk, gv = torch.autograd.grad(out, (tq, tk, tv), tdo, retain_graph=True)
                torch.cuda.synchronize()
                errs = [rel_err(a, b) for a, b in ((dq, gq), (dk, gk), (dv, gv))]
                t_attnc = time_batches([lambda c=s[-1]: attn.launch_backward(c) for s in sets])
                t_plain = time_plain(attn, [lambda c=s[-1]: attn.launch_backward(c) for s in sets])
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    t_cudnn = time_batches([lambda r=r: torch.autograd.grad(r[3], r[:3], r[4], retain_graph=True)
                                            for r in ref_sets])
                flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
                row = dict(D=D, S=S, B=B, H=H, causal=causal, rel_err_dq=errs[0], rel_err_dk=errs[1],
                           rel_err_dv=errs[2], attnc_ms=t_attnc, attnc_plain_ms=t_plain, cudnn_ms=t_cudnn,
                           attnc_tflops=flops / t_attnc / 1e9, cudnn_tflops=flops / t_cudnn / 1e9,
                           ratio=t_cudnn / t_attnc)
                row.update(fa4_backward_row(args.fa4_mod, sets, (gq, gk, gv), causal, flops, t_attnc))
                rows.append(row)
                print(json.dumps(row), flush=True)
                for s in sets:
                    s[-1].close()
                del sets, ref_sets
            mod.close()
    # Overheads at S 4k, non-causal, per head dim: dropout (rate 0.1) and deterministic mode
    # (refused at D 256, so not timed there).
    for D in [int(d) for d in args.dims.split(",")]:
        extra += backward_overheads(attn, D)
    return rows, extra


def backward_overheads(attn, D):
    extra = []
    S = 4096
    H, B = 2048 // D, 16384 // S
    flops = 2.5 * 4 * B * H * S * S * D
    for name, dropout, det in (("plain", False, False), ("dropout 0.1", True, False),
                               ("deterministic", False, True)):
        if det and D > 128:
            continue
        mod = attn.compile("bwd", backward_graph_text(D, False, dropout))
        sets = backward_sets(attn, mod, B, H, S, D)
        for s in sets:
            attn.set_deterministic(s[-1], det)
        same = None
        if det:  # two launches must agree bit for bit
            q, k, v, do, dq, dk, dv, o, lse, c = sets[0]
            attn.launch_backward(c)
            first = [x.clone() for x in (dq, dk, dv)]
            attn.launch_backward(c)
            torch.cuda.synchronize()
            same = all(torch.equal(a, b) for a, b in zip(first, (dq, dk, dv)))
        t = time_batches([lambda c=s[-1]: attn.launch_backward(c) for s in sets])
        # The same graph's forward (dropout's forward cost; the mode changes only the backward).
        t_fwd = time_batches([lambda c=s[-1]: attn.launch(c) for s in sets])
        row = dict(variant=name, D=D, S=S, B=B, H=H, attnc_ms=t, attnc_tflops=flops / t / 1e9,
                   bit_identical=same, fwd_ms=t_fwd)
        if not det:  # cuDNN's own cost of dropout, same shape (its forward, then its backward)
            row["cudnn_fwd_ms"], row["cudnn_ms"] = cudnn_dropout_times(B, H, S, D, 0.1 if dropout else 0.0)
        extra.append(row)
        print(json.dumps(row), flush=True)
        for s in sets:
            s[-1].close()
        del sets
        mod.close()
    return extra


def backward_table(rows, extra):
    lines = []
    if rows:
        geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
        lines += ["Backward only (forward outputs kept); FLOPs = 2.5 x forward; B*S = 16384, H = 2048/D.", "",
                  "| D | S | causal | attnc TFLOP/s | cuDNN TFLOP/s | attnc / cuDNN | FA4 TFLOP/s | attnc / FA4 | "
                  "rel err dq / dk / dv vs cuDNN |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['D']} | {r['S']} | {'yes' if r['causal'] else 'no'} | {r['attnc_tflops']:.0f} | "
                         f"{r['cudnn_tflops']:.0f} | {r['ratio']:.2f} | {fa4_cells(r)} | {r['rel_err_dq']:.1e} / "
                         f"{r['rel_err_dk']:.1e} / {r['rel_err_dv']:.1e} |")
        worst = min(rows, key=lambda r: r["ratio"])
        lines += ["", f"Geometric mean attnc / cuDNN (backward): {geo:.3f}; lowest {worst['ratio']:.2f} "
                  f"(D {worst['D']}, S {worst['S']}, causal {worst['causal']})", ""]
        lines += fa4_summary(rows, "backward")
        lines += overlap_summary(rows)
    if extra:
        lines += ["attnc backward overheads, S 4096, B 4, H 2048/D, non-causal (and the same graph's "
                  "forward):", "",
                  "| D | variant | attnc ms | TFLOP/s | over plain | bit-identical twice | forward ms | "
                  "forward over plain | cuDNN ms (over plain) | cuDNN forward ms (over plain) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in extra:
            base = next((x for x in extra if x["variant"] == "plain" and x["D"] == r["D"]), None)
            over = f"{r['attnc_ms'] / base['attnc_ms'] - 1:+.1%}" if base else "-"
            fwd_over = f"{r['fwd_ms'] / base['fwd_ms'] - 1:+.1%}" if base and "fwd_ms" in r else "-"
            fwd = f"{r['fwd_ms']:.3f}" if "fwd_ms" in r else "-"
            same = "-" if r["bit_identical"] is None else ("yes" if r["bit_identical"] else "NO")
            cud = []
            for key in ("cudnn_ms", "cudnn_fwd_ms"):
                x, x0 = r.get(key), base.get(key) if base else None
                cud.append("-" if x is None else f"{x:.3f}" + (f" ({x / x0 - 1:+.1%})" if x0 else ""))
            lines.append(f"| {r['D']} | {r['variant']} | {r['attnc_ms']:.3f} | {r['attnc_tflops']:.0f} | {over} | {same} | "
                         f"{fwd} | {fwd_over} | {cud[0]} | {cud[1]} |")
        lines.append("")
    return lines


def write_report(out_dir, name, text, data):
    """Prints a table and keeps it as OUT/NAME.md, with its rows as OUT/NAME.json."""
    print(text)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(data, f, indent=1)


def driver_version():
    try:
        import subprocess
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip()
    except Exception:
        return "?"


def grid_table(rows, compile_rows):
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    lines = ["| D | S | causal | attnc TFLOP/s | cuDNN TFLOP/s | FA2 TFLOP/s | attnc / cuDNN | FA4 TFLOP/s | "
             "attnc / FA4 | rel err vs cuDNN |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['D']} | {r['S']} | {'yes' if r['causal'] else 'no'} | {r['attnc_tflops']:.0f} | "
                     f"{r['cudnn_tflops']:.0f} | {r['fa2_tflops']:.0f} | {r['ratio']:.2f} | {fa4_cells(r)} | "
                     f"{r['rel_err_vs_cudnn']:.1e} |")
    worst = min(rows, key=lambda r: r["ratio"])
    lines += ["", f"Geometric mean attnc / cuDNN: {geo:.3f}; lowest {worst['ratio']:.2f} "
              f"(D {worst['D']}, S {worst['S']}, causal {worst['causal']})", ""]
    lines += fa4_summary(rows, "forward")
    lines += overlap_summary(rows)
    lines += ["| D | causal | cold NVRTC compile ms | warm cache load ms | from (cold, warm) |",
              "|---|---|---|---|---|"]
    for r in compile_rows:
        lines.append(f"| {r['D']} | {'yes' if r['causal'] else 'no'} | {r['cold_ms']:.0f} | {r['warm_ms']:.1f} "
                     f"| {r.get('cold_from', '?')}, {r.get('warm_from', '?')} |")
    return lines + [""]


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # matplotlib is optional on the GPU machine
        print(f"no plot: {e}")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        for D in sorted({r["D"] for r in rows}):
            rs = [r for r in rows if r["D"] == D and r["causal"] == causal]
            S = [r["S"] for r in rs]
            ax.plot(S, [r["attnc_tflops"] for r in rs], "o-", label=f"attnc D{D}")
            ax.plot(S, [r["cudnn_tflops"] for r in rs], "x--", label=f"cuDNN D{D}")
        ax.set_xscale("log", base=2)
        ax.set_title("causal" if causal else "non-causal")
        ax.set_xlabel("sequence length")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("TFLOP/s (bf16 forward)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# Custom variants: the same modification in attnc and in FlexAttention, D 128, S 4096.
VARIANT_SHAPE = dict(B=4, H=16, S=4096, D=128)


def variant_defs():
    D = VARIANT_SHAPE["D"]
    head = (f"    input q : bf16[B, H, S, {D}];\n    input k : bf16[B, H, S, {D}];\n"
            f"    input v : bf16[B, H, S, {D}];\n    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = (q @ k^T) * scale;\n")
    tail = f"    o = softmax(s) @ v;\n    output o : bf16[B, H, S, {D}];\n}}\n"
    return {
        "plain": ("", "", None, None),
        "softcap": ("", "    s = 30.0 * tanh(s / 30.0);\n", "softcap", None),
        "alibi": ("    input slopes : f32[H];\n", "    s = s - slopes[h] * (i - j);\n    s = mask(s, j <= i);\n",
                  "alibi", "causal"),
        "causal": ("", "    s = mask(s, j <= i);\n", None, "causal"),
        "sliding_window": ("", "    s = mask(s, j <= i && j > i - 1024);\n", None, "window"),
        # StreamingLLM: 4 sink tokens beside the window (a disjunction: two
        # key ranges per query tile, both skipped tile-wise).
        "streaming_llm": ("", "    s = mask(s, j <= i && (j < 4 || j > i - 1024));\n", None, "streaming"),
        "document": ("    input doc : i32[B, S];\n", "    s = mask(s, doc[b, i] == doc[b, j]);\n", None, "document"),
    }, head, tail


def run_variants(attn):
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    import torch._dynamo
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 4096)
    flex = torch.compile(flex_attention, dynamic=False)
    B, H, S, D = (VARIANT_SHAPE[x] for x in "BHSD")
    defs, head, tail = variant_defs()
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slopes = torch.tensor([2.0 ** (-8.0 * (n + 1) / H) for n in range(H)], device="cuda", dtype=torch.float32)
    # Documents of random lengths packed along the sequence.
    cuts = sorted(torch.randint(1, S, (7,)).tolist())
    doc = torch.zeros(B, S, dtype=torch.int32, device="cuda")
    for c in cuts:
        doc[:, c:] += 1
    scale = 1.0 / math.sqrt(D)
    score_mods = {
        "softcap": lambda sc, b, h, qi, kv: 30.0 * torch.tanh(sc / 30.0),
        "alibi": lambda sc, b, h, qi, kv: sc - slopes[h] * (qi - kv),
    }
    mask_mods = {
        "causal": lambda b, h, qi, kv: qi >= kv,
        "window": lambda b, h, qi, kv: (qi >= kv) & (qi - kv < 1024),
        "streaming": lambda b, h, qi, kv: (qi >= kv) & ((kv < 4) | (qi - kv < 1024)),
        "document": lambda b, h, qi, kv: doc[b, qi] == doc[b, kv],
    }
    rows = []
    for name, (decls, body, smod, mmod) in defs.items():
        text = f"attention {name} {{\n{head.replace('    s = (q', decls + '    s = (q')}{body}{tail}"
        mod = attn.compile(name, text)
        o = torch.empty_like(q)
        tensors = dict(q=q, k=k, v=v, o=o)
        if "slopes" in decls:
            tensors["slopes"] = slopes
        if "doc" in decls:
            tensors["doc"] = doc
        call = attn.call(mod, name, tensors)
        bm = create_block_mask(mask_mods[mmod], B if mmod == "document" else None, None, S, S) if mmod else None
        sm = score_mods.get(smod)
        ref = flex(q, k, v, score_mod=sm, block_mask=bm, scale=scale)
        attn.launch(call)
        torch.cuda.synchronize()
        err = rel_err(o, ref)
        t_attnc = time_batches([lambda: attn.launch(call)])
        t_flex = time_batches([lambda: flex(q, k, v, score_mod=sm, block_mask=bm, scale=scale)])
        flops = 4 * B * H * S * S * D
        row = dict(variant=name, attnc_ms=t_attnc, flex_ms=t_flex, rel_err_vs_flex=err,
                   attnc_dense_tflops=flops / t_attnc / 1e9, flex_dense_tflops=flops / t_flex / 1e9,
                   speedup_vs_flex=t_flex / t_attnc)
        rows.append(row)
        print(json.dumps(row), flush=True)
        call.close()
        mod.close()
    return rows


def variant_table(vrows):
    plain = {r["variant"]: r["attnc_ms"] for r in vrows}
    lines = [f"Custom variants, B {VARIANT_SHAPE['B']}, H {VARIANT_SHAPE['H']}, S {VARIANT_SHAPE['S']}, "
             f"D {VARIANT_SHAPE['D']} (TFLOP/s count every (i, j) pair, masked or not):", "",
             "| variant | attnc ms | FlexAttention ms | attnc / Flex speed | attnc dense TFLOP/s | rel err vs Flex |",
             "|---|---|---|---|---|---|"]
    for r in vrows:
        lines.append(f"| {r['variant']} | {r['attnc_ms']:.3f} | {r['flex_ms']:.3f} | {r['speedup_vs_flex']:.2f} | "
                     f"{r['attnc_dense_tflops']:.0f} | {r['rel_err_vs_flex']:.1e} |")
    if "plain" in plain and "softcap" in plain:
        lines.append(f"\nsoftcap over plain: {plain['softcap'] / plain['plain'] - 1:+.1%}")
    if "causal" in plain and "alibi" in plain:
        lines.append(f"ALiBi (causal) over causal: {plain['alibi'] / plain['causal'] - 1:+.1%}")
    return lines + [""]


if __name__ == "__main__":
    main()
