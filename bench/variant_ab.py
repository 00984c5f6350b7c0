"""variant_ab.py: fwd_sm90's variants against the default, in one process on the same tensors.

    python3 bench/variant_ab.py [--lib build/libattn.so] [--out DIR] [--variants bn176]
                                [--dims 128] [--seqs 1024,2048,4096,8192,16384] [--causal]
                                [--fp8 | --alibi] [--rounds N]

Per head dim and sequence length (B*S = 16384, H = 2048/D, bench.py's grid graph; with --fp8,
bench/fp8.py's FP8 graph with P rounded to e4m3 and an e4m3 O, on e4m3 inputs), the default
("auto") and each named variant (ATTN_OPTION_SM90_VARIANT, compiler/tmpl_sm90.c) compiled from the
same text, cuDNN's bf16 SDPA on the same values, and for each setting its time, TFLOP/s, its speed
against auto and against cuDNN bf16, and its relative error against cuDNN bf16. A variant that does
not apply to a shape compiles to auto's kernel, so its row then only measures noise. With --alibi,
the ALiBi graph (slopes[h] * (i - j) subtracted from the score: a score that reads a table, which
takes the masked graphs' tiles), whose errors are against auto's output (cuDNN's column is still
its plain SDPA's time, a scale, not the same computation). With --rounds N, every variant is
timed N times, the order reversed every other round, and its time is the median (the table's
spread column: its slowest round over its fastest), so a GPU that slows as it heats under one
long configuration weighs on auto and the variant alike (session 43: FP8 D 128 S 16k measured
-9% for o_smem timed second).
"""
import argparse, json, os, statistics, sys, time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, graph_text, rel_err, time_batches, driver_version, write_report  # noqa: E402
from fp8 import fp8_text  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--variants", default="bn176")
    ap.add_argument("--dims", default="128")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--causal", action="store_true", help="the causal graph too")
    ap.add_argument("--fp8", action="store_true", help="the FP8 graph (e4m3 q, k, v, P and O)")
    ap.add_argument("--alibi", action="store_true", help="the ALiBi graph (errors against auto's)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every variant this many times, the order reversed every other "
                         "round; ms is the median over the rounds")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    if args.fp8 and args.alibi:
        ap.error("--fp8 and --alibi are separate graphs: one at a time")
    names = ["auto"] + [v for v in args.variants.split(",") if v != "auto"]
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    attn = Attn(os.path.abspath(args.lib))
    rows = []
    for D in (int(d) for d in args.dims.split(",")):
        H = 2048 // D
        for causal in (False, True) if args.causal else (False,):
            mods = {}
            for name in names:
                attn.set_sm90_variant(name)
                mods[name] = attn.compile("fwd", fp8_text(D, causal, p8=True) if args.fp8
                                          else graph_text(D, causal, alibi=args.alibi))
            attn.set_sm90_variant("auto")
            for S in (int(s) for s in args.seqs.split(",")):
                B = max(1, 16384 // S)
                # FP8: e4m3 values (bench/fp8.py's), and cuDNN on the same values in bf16.
                dt = torch.float8_e4m3fn if args.fp8 else torch.bfloat16
                sets = [tuple(torch.randn(B, H, S, D, device="cuda").to(dt) for _ in range(3))
                        for _ in range(3)]
                sets16 = [tuple(x.to(torch.bfloat16) for x in st) for st in sets]
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    ref = F.scaled_dot_product_attention(*sets16[0], is_causal=causal)
                    t_cudnn = time_batches([lambda s=s: F.scaled_dot_product_attention(*s, is_causal=causal)
                                            for s in sets16])
                flops = 4 * B * H * S * S * D / (2 if causal else 1)
                slopes = torch.tensor([2.0 ** (-8.0 * (n + 1) / H) for n in range(H)], device="cuda")
                auto_out = None
                calls_of, row_of = {}, {}
                alive = []  # (the calls hold raw pointers: every variant's outputs live to the end)
                for name in names:
                    calls, outs = [], []
                    for q, k, v in sets:
                        o = torch.empty_like(q)
                        outs.append(o)
                        bind = dict(q=q, k=k, v=v, o=o)
                        if args.fp8:
                            bind["amax_o"] = torch.empty(1, device="cuda")
                        if args.alibi:
                            bind["slopes"] = slopes
                        calls.append(attn.call(mods[name], "f8" if args.fp8 else "fwd", bind))
                        alive.append(bind)
                    attn.launch(calls[0])
                    torch.cuda.synchronize()
                    if name == "auto":
                        auto_out = outs[0].clone()
                    err = rel_err(outs[0], auto_out if args.alibi else ref)
                    calls_of[name] = calls
                    row_of[name] = dict(D=D, S=S, B=B, H=H, causal=causal, variant=name,
                                        cudnn_ms=t_cudnn, rel_err_vs_cudnn=err, round_ms=[])
                # Timed in rounds, the order reversed every other round (auto first, then
                # last): a GPU that slows as it heats then weighs on every variant alike.
                for r in range(args.rounds):
                    for name in names if r % 2 == 0 else names[::-1]:
                        row_of[name]["round_ms"].append(
                            time_batches([lambda c=c: attn.launch(c) for c in calls_of[name]]))
                for name in names:
                    row = row_of[name]
                    row["ms"] = statistics.median(row["round_ms"])
                    row["tflops"] = flops / row["ms"] / 1e9
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    for c in calls_of[name]:
                        c.close()
                del sets, sets16, ref
                torch.cuda.empty_cache()
            for m in mods.values():
                m.close()
    lines = [f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; {time.strftime('%Y-%m-%d')}",
             "", "B*S = 16384, H = 2048/D; " + ("FP8 (e4m3 q, k, v, P and O)" if args.fp8 else
                                                 "bf16, ALiBi (errors against auto's output; cuDNN: "
                                                 "its plain SDPA's time)" if args.alibi else "bf16")
             + "; one process, the same tensors (cuDNN: bf16 on the same values).", "",
             "| D | causal | S | variant | ms | TFLOP/s | vs auto | vs cuDNN | rel err vs "
             + ("auto" if args.alibi else "cuDNN") + " | rounds | spread |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        auto = next(x for x in rows if (x["D"], x["S"], x["causal"]) == (r["D"], r["S"], r["causal"])
                    and x["variant"] == "auto")
        lines.append(f"| {r['D']} | {'yes' if r['causal'] else 'no'} | {r['S']} | {r['variant']} | "
                     f"{r['ms']:.3f} | {r['tflops']:.0f} | {auto['ms'] / r['ms']:.3f} | "
                     f"{r['cudnn_ms'] / r['ms']:.3f} | {r['rel_err_vs_cudnn']:.1e} | "
                     f"{len(r['round_ms'])} | {max(r['round_ms']) / min(r['round_ms']):.3f} |")
    write_report(args.out, "bench-variant-ab" + ("-fp8" if args.fp8 else "-alibi" if args.alibi else ""),
                 "\n".join(lines),
                 dict(rows=rows, device=torch.cuda.get_device_name()))


if __name__ == "__main__":
    main()
