"""fp8_kv.py: an FP8 KV cache under a bf16 q (issue 17's mixed precision), prefill shapes.

Runs on the GPU machine: python3 bench/fp8_kv.py [--lib build/libattn.so] [--out DIR]
                                                 [--dims 64,128,192] [--seqs 1024,4096,16384]

bf16 q against e4m3 k and v (FlashInfer's and vLLM's FP8 cache), GQA 32:8 (H = 32, Hk = 8),
B*S = 16384, non-causal and causal, beside the same graph with bf16 k and v holding the same
(dequantized) values, all in one process on the same tensors:
  - attnc FP8 cache on sm_90a (fwd_sm90: K and V tiles converted to bf16 in shared memory by the
    producer warpgroup's three idle warps, session 28),
  - the same graph on the portable template (fwd_sm80, the attnc context's arch set to sm_90:
    what an FP8 cache ran on before session 28),
  - attnc bf16 k and v (fwd_sm90),
  - cuDNN bf16 (PyTorch SDPA; GQA by repeating k and v's heads, which SDPA's cuDNN path needs).
Each attnc output is checked against cuDNN's on the dequantized values before it is timed (the
conversion is exact, so the difference is bf16 rounding); FLOPs 4*B*H*S*S*D, halved when causal.
"""
import argparse, json, os, sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, driver_version, graph_text, rel_err, time_batches, write_report  # noqa: E402

H, HK = 32, 8


def kv_text(D, causal, kv_type):
    return graph_text(D, causal, kv_type=kv_type, kv_heads="Hk", name="kv")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--dims", default="64,128,192")
    ap.add_argument("--seqs", default="1024,4096,16384")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    lib = os.path.abspath(args.lib)
    native, portable = Attn(lib), Attn(lib)
    portable.set_arch("sm_90")
    rows = []
    for D in (int(d) for d in args.dims.split(",")):
        for causal in (False, True):
            m8 = native.compile("kv8", kv_text(D, causal, "e4m3"))
            m8p = portable.compile("kv8p", kv_text(D, causal, "e4m3"))
            m16 = native.compile("kv16", kv_text(D, causal, "bf16"))
            for S in (int(s) for s in args.seqs.split(",")):
                B = max(1, 16384 // S)
                sets = []
                for _ in range(3):
                    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                    k8, v8 = (torch.randn(B, HK, S, D, device="cuda").to(torch.float8_e4m3fn)
                              for _ in range(2))
                    k16, v16 = k8.to(torch.bfloat16), v8.to(torch.bfloat16)
                    o8, o8p, o16 = (torch.empty_like(q) for _ in range(3))
                    sets.append(dict(
                        q=q, k8=k8, v8=v8, k16=k16, v16=v16,  # (the calls keep no reference)
                        kr=k16.repeat_interleave(H // HK, 1), vr=v16.repeat_interleave(H // HK, 1),
                        c8=native.call(m8, "kv", dict(q=q, k=k8, v=v8, o=o8)), o8=o8,
                        c8p=portable.call(m8p, "kv", dict(q=q, k=k8, v=v8, o=o8p)), o8p=o8p,
                        c16=native.call(m16, "kv", dict(q=q, k=k16, v=v16, o=o16)), o16=o16))
                s0 = sets[0]
                native.launch(s0["c8"])
                portable.launch(s0["c8p"])
                native.launch(s0["c16"])
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    ref = F.scaled_dot_product_attention(s0["q"], s0["kr"], s0["vr"], is_causal=causal)
                torch.cuda.synchronize()
                errs = {k: rel_err(s0[k], ref) for k in ("o8", "o8p", "o16")}
                t8 = time_batches([lambda s=s: native.launch(s["c8"]) for s in sets])
                t8p = time_batches([lambda s=s: portable.launch(s["c8p"]) for s in sets])
                t16 = time_batches([lambda s=s: native.launch(s["c16"]) for s in sets])
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    tc = time_batches([lambda s=s: F.scaled_dot_product_attention(
                        s["q"], s["kr"], s["vr"], is_causal=causal) for s in sets])
                fl = 4 * B * H * S * S * D / (2 if causal else 1)
                row = dict(D=D, S=S, B=B, causal=causal, kv8_ms=t8, kv8_sm80_ms=t8p, bf16_ms=t16,
                           cudnn_ms=tc, kv8_tflops=fl / t8 / 1e9, kv8_sm80_tflops=fl / t8p / 1e9,
                           bf16_tflops=fl / t16 / 1e9, cudnn_tflops=fl / tc / 1e9,
                           rel_err_vs_cudnn=errs)
                rows.append(row)
                print(json.dumps(row), flush=True)
                for s in sets:
                    for c in ("c8", "c8p", "c16"):
                        s[c].close()
            for m in (m8, m8p, m16):
                m.close()
    lines = [f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; "
             f"cuDNN {torch.backends.cudnn.version()}; bf16 q, e4m3 k and v, GQA {H}:{HK}, B*S = 16384", "",
             "| D | S | causal | FP8 cache, fwd_sm90 TFLOP/s | FP8 cache, fwd_sm80 | bf16 cache (attnc) | cuDNN bf16 "
             "| FP8 / bf16 (attnc) | fwd_sm90 / fwd_sm80 | FP8 / cuDNN bf16 | rel err vs cuDNN (FP8 sm90, sm80, bf16) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = r["rel_err_vs_cudnn"]
        lines.append(f"| {r['D']} | {r['S']} | {'yes' if r['causal'] else 'no'} | {r['kv8_tflops']:.0f} | "
                     f"{r['kv8_sm80_tflops']:.0f} | {r['bf16_tflops']:.0f} | {r['cudnn_tflops']:.0f} | "
                     f"{r['bf16_ms'] / r['kv8_ms']:.2f} | {r['kv8_sm80_ms'] / r['kv8_ms']:.2f} | "
                     f"{r['cudnn_ms'] / r['kv8_ms']:.2f} | {e['o8']:.1e}, {e['o8p']:.1e}, {e['o16']:.1e} |")
    write_report(args.out, "bench-fp8-kv", "\n".join(lines), rows)


if __name__ == "__main__":
    main()
