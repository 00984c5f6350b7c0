"""exp2_fma.py: the softmax's exponentials split between MUFU and the FMA pipe (issue 19's softcap
bar: softcap <= 10% over plain at D 128 and 256, <= 25% at D 64).

    python3 bench/exp2_fma.py [--lib build/libattn.so] [--out DIR] [--dims 64,128,256] [--seq 4096]
                              [--settings none,1/4,2/4,3/4,4/4] [--variant pv_overlap]

Per head dim, in one process on the same tensors (B*S = 16384, H = 2048/D, non-causal): the plain
graph and the softcapped one (30 tanh(s / 30), as bench.py's variant), each compiled with
ATTN_OPTION_EXP2_FMA none and one, two, three and four of every four key blocks' exponentials on
the FMA pipe (templates/softmax.cuh, attn_exp2_fma); times by bench.py's time_batches, relative
error against a float32 torch reference of the same math. Reports each setting's time, its speed
against the setting "none" of the same graph, and softcap's cost over plain under the same setting
and under plain's best.
"""
import argparse, json, math, os, sys, time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, checked_variant, time_batches, driver_version, write_report  # noqa: E402

SETTINGS = [("none", 1), ("1/4", 2), ("2/4", 3), ("3/4", 4), ("4/4", 5)]  # option values


def graph_text(D, softcap):
    cap = "    s = 30.0 * tanh(s / 30.0);\n" if softcap else ""
    return (f"attention fwd {{\n    input q : bf16[B, H, S, {D}];\n    input k : bf16[B, H, S, {D}];\n"
            f"    input v : bf16[B, H, S, {D}];\n    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = (q @ k^T) * scale;\n{cap}    o = softmax(s) @ v;\n"
            f"    output o : bf16[B, H, S, {D}];\n}}\n")


def reference(q, k, v, softcap):
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if softcap:
        s = 30.0 * torch.tanh(s / 30.0)
    return torch.softmax(s, -1) @ v.float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--settings", default=",".join(n for n, _ in SETTINGS),
                    help="which settings to time (none alone: softcap's cost over plain at the default)")
    ap.add_argument("--variant", default="auto",
                    help="fwd_sm90's variant for every compile (e.g. pv_overlap: the split measured "
                         "again once P V overlaps the softmax)")
    args = ap.parse_args()
    wanted = args.settings.split(",")
    unknown = [w for w in wanted if w not in dict(SETTINGS)]
    if unknown or "none" not in wanted:
        ap.error(f"--settings: {unknown or 'none is needed'} (known: {', '.join(n for n, _ in SETTINGS)})")
    checked_variant(ap, args.variant)
    settings = [(n, v) for n, v in SETTINGS if n in wanted]
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    attn = Attn(os.path.abspath(args.lib))
    attn.set_sm90_variant(args.variant)
    rows = []
    S = args.seq
    for D in (int(d) for d in args.dims.split(",")):
        H, B = 2048 // D, max(1, 16384 // S)
        sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                for _ in range(3)]
        refs = {cap: reference(*sets[0], cap) for cap in (False, True)}
        for cap in (False, True):
            for name, value in settings:
                attn.set_option("exp2_fma", value)
                mod = attn.compile("fwd", graph_text(D, cap))
                calls, outs = [], []
                for q, k, v in sets:
                    o = torch.empty_like(q)
                    outs.append(o)
                    calls.append(attn.call(mod, "fwd", dict(q=q, k=k, v=v, o=o)))
                attn.launch(calls[0])
                torch.cuda.synchronize()
                ref = refs[cap]
                err = ((outs[0].float() - ref).norm() / ref.norm()).item()
                ms = time_batches([lambda c=c: attn.launch(c) for c in calls])
                row = dict(D=D, S=S, B=B, H=H, softcap=cap, setting=name, ms=ms,
                           tflops=4 * B * H * S * S * D / ms / 1e9, rel_err=err)
                rows.append(row)
                print(json.dumps(row), flush=True)
                for c in calls:
                    c.close()
                mod.close()
        attn.set_option("exp2_fma", 0)
        del sets, refs
        torch.cuda.empty_cache()
    lines = [f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; {time.strftime('%Y-%m-%d')}",
             "", f"S {S}, B*S = 16384, H = 2048/D, non-causal; softcap 30 tanh(s / 30); fwd_sm90 "
             f"variant {args.variant}.", "",
             "| D | graph | setting | ms | TFLOP/s | vs none | softcap over plain (same setting) | rel err |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        none = next(x for x in rows if x["D"] == r["D"] and x["softcap"] == r["softcap"]
                    and x["setting"] == "none")
        plain = next(x for x in rows if x["D"] == r["D"] and not x["softcap"] and x["setting"] == r["setting"])
        over = f"{r['ms'] / plain['ms'] - 1:+.1%}" if r["softcap"] else "-"
        lines.append(f"| {r['D']} | {'softcap' if r['softcap'] else 'plain'} | {r['setting']} | {r['ms']:.3f} | "
                     f"{r['tflops']:.0f} | {none['ms'] / r['ms']:.3f} | {over} | {r['rel_err']:.1e} |")
    lines.append("")
    for D in sorted({r["D"] for r in rows}):
        best_plain = min(r["ms"] for r in rows if r["D"] == D and not r["softcap"])
        best_cap = min((r for r in rows if r["D"] == D and r["softcap"]), key=lambda r: r["ms"])
        lines.append(f"D {D}: softcap's best ({best_cap['setting']}) {best_cap['ms'] / best_plain - 1:+.1%} "
                     f"over plain's best")
    write_report(args.out, "bench-exp2-fma", "\n".join(lines),
                 dict(rows=rows, device=torch.cuda.get_device_name()))


if __name__ == "__main__":
    main()
