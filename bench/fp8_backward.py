"""fp8_backward.py: attnc's FP8 backward against its bf16 backward and cuDNN's FP8 backward, one process.

Runs on the GPU machine: python3 bench/fp8_backward.py [--lib build/libattn.so] [--out DIR]
                                                       [--quick] [--compile-only]

Issue 17's grid (B*S = 16384, H = 2048 / D, S 1k-16k, causal or not) for cuDNN's recipe written as
a graph: e4m3 q, k, v, P rounded to e4m3 with scale_s 448, e4m3 O, lse; a grad block with e4m3
dO, dS rounded to e4m3 with scale_dp, e4m3 gradients with their scales, and the amax of dS and of
each gradient. The scales are set the way training sets them (delayed scaling): one backward at
scale 1 gives the amax outputs, each scale is then 448 / amax, and the timed backwards use them.

Columns, each the backward alone (the forward once per input set, o and lse kept):
  bf16      attnc's bf16 backward (bench.py's backward graph) on the dequantized inputs
  fp8       attnc's FP8 backward on bwd_sm90 with bf16 wgmma over 16-bit copies of the FP8
            tensors (ATTN_OPTION_BACKWARD_TEMPLATE 90; docs/templates.md)
  fp8_mma   bwd_sm90's FP8 tensor-core mode (option 91, sm_90a's default where it applies: head
            dim 128; elsewhere the same kernels as fp8)
  cudnn     cuDNN's sdpa_fp8_backward on the same FP8 tensors (D 128 only: it refuses others on
            Hopper), when the cudnn frontend imports (carry its wheel, ../shared/tools/
            anchor_bench2.py); absent otherwise
TFLOP/s count 2.5x the forward's 4 B H S^2 D (half when causal). Errors: each FP8 backward's
dequantized dq, dk, dv against the bf16 backward's, relative L2 (cuDNN's too, on the same dO).

--compile-only compiles every graph for sm_90a in both modes and prints which take the
tensor-core mode (no GPU needed: a check for the development machine).
"""
import argparse, json, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def fp8_text(D, causal):
    mask = "    s = mask(s, j <= i);\n" if causal else ""
    return ("attention f8b {\n"
            f"    input q : e4m3[B, H, S, {D}];\n    input k : e4m3[B, H, S, {D}];\n"
            f"    input v : e4m3[B, H, S, {D}];\n    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = (q @ k^T) * scale;\n{mask}"
            "    out = (e4m3(softmax(s) * 448.0) @ v) / 448.0;\n"
            f"    output o : e4m3[B, H, S, {D}] = out;\n"
            "    output lse = logsumexp(s);\n"
            "    grad q, k, v {\n"
            "        scalar scale_dp : f32 = 1.0;\n        scalar scale_dq : f32 = 1.0;\n"
            "        scalar scale_dk : f32 = 1.0;\n        scalar scale_dv : f32 = 1.0;\n"
            "        input do : e4m3;\n"
            "        output amax_dp = amax(ds);\n"
            "        ds = e4m3(ds * scale_dp) / scale_dp;\n"
            "        output dq : e4m3 = dq * scale_dq;\n        output dk : e4m3 = dk * scale_dk;\n"
            "        output dv : e4m3 = dv * scale_dv;\n"
            "        output amax_dq = amax(dq);\n        output amax_dk = amax(dk);\n"
            "        output amax_dv = amax(dv);\n"
            "    }\n}\n")


AMAX = ("amax_dp", "amax_dq", "amax_dk", "amax_dv")
SCALES = ("scale_dp", "scale_dq", "scale_dk", "scale_dv")


def compile_only(args):
    """Every graph for sm_90a, default and tensor-core mode, through the attnc command."""
    import subprocess, tempfile
    attnc = os.path.join(os.path.dirname(os.path.abspath(args.lib)), "attnc")
    with tempfile.TemporaryDirectory() as d:
        for D in (64, 128, 256):
            for causal in (False, True):
                path = os.path.join(d, f"f8_{D}_{int(causal)}.attn")
                open(path, "w").write(fp8_text(D, causal))
                for mode in ("sm90", "sm90f8"):
                    env = dict(os.environ, ATTN_BWD_TEMPLATE=mode)
                    plan = subprocess.run([attnc, "plan", path], env=env, capture_output=True, text=True)
                    r = subprocess.run([attnc, "compile", path, "--arch", "sm_90a", "--part", "backward",
                                        "-o", os.path.join(d, "x.cubin")], env=env, capture_output=True,
                                       text=True)
                    print(json.dumps(dict(D=D, causal=causal, mode=mode,
                                          tensor_core_mode="transpose8" in plan.stdout,
                                          compiled=r.returncode == 0,
                                          error=r.stderr[-300:] if r.returncode else "")), flush=True)


class CudnnFP8Backward:
    """cuDNN's FP8 SDPA backward (cudnn frontend graph API): e4m3 q, k, v, o, dO, f32 stats,
    e4m3 dq, dk, dv, one-element f32 scales, four amax outputs."""

    def __init__(self, B, H, S, D, causal, torch):
        import cudnn
        self.torch, self.cudnn = torch, cudnn
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        f32, e4 = cudnn.data_type.FLOAT, cudnn.data_type.FP8_E4M3
        g = cudnn.pygraph(io_data_type=e4, intermediate_data_type=f32, compute_data_type=f32,
                          handle=self.handle)
        dim, stride = [B, H, S, D], [H * S * D, S * D, D, 1]
        self.t = {n: g.tensor(name=n, dim=dim, stride=stride, data_type=e4)
                  for n in ("q", "k", "v", "o", "do")}
        self.t["stats"] = g.tensor(name="stats", dim=[B, H, S, 1], stride=[H * S, S, 1, 1], data_type=f32)
        names = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s",
                 "descale_dP", "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP")
        self.sc = {n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
                   for n in names}
        outs = g.sdpa_fp8_backward(name="sdpa_fp8_backward", q=self.t["q"], k=self.t["k"],
                                   v=self.t["v"], o=self.t["o"], dO=self.t["do"],
                                   stats=self.t["stats"], attn_scale=1.0 / math.sqrt(D),
                                   use_causal_mask=causal, **self.sc)
        self.grads, self.amax = outs[:3], outs[3:]
        for t in self.grads:
            t.set_output(True).set_dim(dim).set_stride(stride).set_data_type(e4)
        for a in self.amax:
            a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.g = g
        self.ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
        self.amax_buf = [torch.zeros(1, 1, 1, 1, device="cuda") for _ in self.amax]

    def bind(self, q, k, v, o, do, stats, dq, dk, dv, scales):
        """A launch on these tensors; scales: cuDNN's names to floats."""
        torch = self.torch
        m = {self.t["q"]: q, self.t["k"]: k, self.t["v"]: v, self.t["o"]: o, self.t["do"]: do,
             self.t["stats"]: stats}
        m.update({self.sc[n]: torch.full((1, 1, 1, 1), float(x), device="cuda") for n, x in scales.items()})
        m.update(zip(self.grads, (dq, dk, dv)))
        m.update(zip(self.amax, self.amax_buf))
        return lambda: self.g.execute(m, self.ws, handle=self.handle)


def profile(args):
    """Per-kernel CUDA times of one backward launch of each mode at (D, S), non-causal: 3 warm-up
    launches, then one under torch.profiler (so under ncu, mode m's profiled launch of the main
    kernel is the 4th of that mode, after the earlier modes' 4 each)."""
    import torch
    from bench import Attn, backward_graph_text
    torch.zeros(1, device="cuda")
    attn = Attn(os.path.abspath(args.lib))
    D, S = (int(x) for x in args.profile.split(","))
    B, H, e4 = 16384 // S, 2048 // D, torch.float8_e4m3fn
    q8, k8, v8, do8 = (torch.randn(B, H, S, D, device="cuda").to(e4) for _ in range(4))
    options = {"bf16": 0, "fp8": 90, "fp8_mma": 91}
    for mode in args.modes.split(","):
        attn.set_option("backward_template", options[mode])
        if mode == "bf16":
            mod = attn.compile("p_bf16.attn", backward_graph_text(D, False))
            q, k, v, do = (x.to(torch.bfloat16) for x in (q8, k8, v8, do8))
            g = [torch.empty_like(q) for _ in range(3)]
            c = attn.call(mod, "bwd", dict(q=q, k=k, v=v, o=torch.empty_like(q),
                                           lse=torch.empty(B, H, S, device="cuda")))
            attn.launch(c)
            attn.bind(c, dict(do=do, dq=g[0], dk=g[1], dv=g[2]))
        else:
            mod = attn.compile(f"p_{mode}.attn", fp8_text(D, False))
            o8 = torch.empty(B, H, S, D, device="cuda", dtype=e4)
            g8 = [torch.empty(B, H, S, D, device="cuda", dtype=e4) for _ in range(3)]
            am = torch.zeros(4, device="cuda")
            c = attn.call(mod, "f8b", dict(q=q8, k=k8, v=v8, o=o8, lse=torch.empty(B, H, S, device="cuda")))
            attn.launch(c)
            attn.bind(c, dict(do=do8, dq=g8[0], dk=g8[1], dv=g8[2],
                              **{n: am[i:i + 1] for i, n in enumerate(AMAX)}))
        for _ in range(3):
            attn.launch_backward(c)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            attn.launch_backward(c)
            torch.cuda.synchronize()
        print(f"== {mode} D {D} S {S}")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
        c.close()
        mod.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="S 4k only")
    ap.add_argument("--dims", default="64,128,256", help="head dims of the grid")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--profile", metavar="D,S", help="each kernel's time in one backward of each "
                    "mode (non-causal; torch.profiler), nothing else")
    ap.add_argument("--modes", default="fp8,fp8_mma", help="with --profile: which of bf16, fp8, fp8_mma")
    args = ap.parse_args()
    if args.compile_only:
        return compile_only(args)
    if args.profile:
        return profile(args)
    import torch
    from bench import Attn, backward_graph_text, time_batches
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")  # a current CUDA context before libattn compiles
    attn = Attn(os.path.abspath(args.lib))
    try:
        import cudnn  # noqa: F401
        have_cudnn = True
    except ImportError as e:
        print(f"cuDNN FP8 backward: not run (no cudnn frontend: {e})", flush=True)
        have_cudnn = False
    seqs = [4096] if args.quick else [1024, 4096, 8192, 16384]
    rows = []
    e4 = torch.float8_e4m3fn
    for D in (int(x) for x in args.dims.split(",")):
        H = 2048 // D
        for causal in (False, True):
            mods = {}
            for mode, opt in (("fp8", 90), ("fp8_mma", 91), ("bf16", 0)):
                attn.set_option("backward_template", opt)
                text = backward_graph_text(D, causal) if mode == "bf16" else fp8_text(D, causal)
                mods[mode] = attn.compile(f"{mode}_{D}_{int(causal)}.attn", text)
            attn.set_option("backward_template", 0)
            for S in seqs:
                B = 16384 // S
                row = dict(D=D, S=S, B=B, H=H, causal=causal)
                q8, k8, v8, do8 = (torch.randn(B, H, S, D, device="cuda").to(e4) for _ in range(4))
                q, k, v, do = (x.to(torch.bfloat16) for x in (q8, k8, v8, do8))
                # bf16: the reference gradients and its time.
                o16 = torch.empty_like(q)
                lse = torch.empty(B, H, S, device="cuda")
                g16 = [torch.empty_like(q) for _ in range(3)]
                c = attn.call(mods["bf16"], "bwd", dict(q=q, k=k, v=v, o=o16, lse=lse))
                attn.launch(c)
                attn.bind(c, dict(do=do, dq=g16[0], dk=g16[1], dv=g16[2]))
                attn.launch_backward(c)
                torch.cuda.synchronize()
                row["bf16_ms"] = time_batches([lambda: attn.launch_backward(c)])
                c.close()
                flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
                for mode in ("fp8", "fp8_mma"):
                    o8 = torch.empty(B, H, S, D, device="cuda", dtype=e4)
                    lse8 = torch.empty(B, H, S, device="cuda")
                    g8 = [torch.empty(B, H, S, D, device="cuda", dtype=e4) for _ in range(3)]
                    am = torch.zeros(4, device="cuda")
                    c = attn.call(mods[mode], "f8b", dict(q=q8, k=k8, v=v8, o=o8, lse=lse8))
                    attn.launch(c)
                    attn.bind(c, dict(do=do8, dq=g8[0], dk=g8[1], dv=g8[2],
                                      **{n: am[i:i + 1] for i, n in enumerate(AMAX)}))
                    try:
                        attn.launch_backward(c)  # scales 1: the amax outputs
                        torch.cuda.synchronize()
                        scales = {s: 448.0 / max(float(am[i]), 1e-30) for i, s in enumerate(SCALES)}
                        for s, x in scales.items():
                            c.bind_scalar(s, x)
                        attn.launch_backward(c)
                        torch.cuda.synchronize()
                        errs = [((g.float() / scales[s] - r.float()).norm() / r.float().norm()).item()
                                for g, s, r in zip(g8, SCALES[1:], g16)]
                        ms = time_batches([lambda: attn.launch_backward(c)])
                        row.update({f"{mode}_ms": ms, f"{mode}_tflops": flops / ms / 1e9,
                                    f"{mode}_rel_err": errs})
                    except Exception as e:  # noqa: BLE001 (the row says why)
                        row[f"{mode}_error"] = str(e)[-300:]
                    c.close()
                if have_cudnn and D == 128:
                    try:
                        cd = CudnnFP8Backward(B, H, S, D, causal, torch)
                        stats = (lse8 * 1.0).unsqueeze(-1).contiguous()  # natural-log lse, as cuDNN's stats
                        gc = [torch.empty(B, H, S, D, device="cuda", dtype=e4) for _ in range(3)]
                        # attnc's forward o (e4m3, scale 1) and lse serve as cuDNN's o and stats.
                        sc = dict(descale_q=1, descale_k=1, descale_v=1, descale_o=1, descale_dO=1,
                                  descale_s=1 / 448.0, scale_s=448.0, descale_dP=1 / scales["scale_dp"],
                                  scale_dP=scales["scale_dp"], scale_dQ=scales["scale_dq"],
                                  scale_dK=scales["scale_dk"], scale_dV=scales["scale_dv"])
                        run = cd.bind(q8, k8, v8, o8, do8, stats, *gc, sc)
                        run()
                        torch.cuda.synchronize()
                        row["cudnn_rel_err"] = [((g.float() / sc[n] - r.float()).norm() / r.float().norm()).item()
                                                for g, n, r in zip(gc, ("scale_dQ", "scale_dK", "scale_dV"), g16)]
                        row["cudnn_ms"] = time_batches([run])
                        row["cudnn_tflops"] = flops / row["cudnn_ms"] / 1e9
                    except Exception as e:  # noqa: BLE001
                        row["cudnn_error"] = str(e)[-300:]
                row["bf16_tflops"] = flops / row["bf16_ms"] / 1e9
                rows.append(row)
                print(json.dumps(row), flush=True)
            for m in mods.values():
                m.close()
    with open(os.path.join(args.out, "fp8_backward.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
