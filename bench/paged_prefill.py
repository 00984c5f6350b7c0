"""paged_prefill.py: a chunk of new queries against a paged KV cache (chunked prefill), attnc paged
beside attnc dense on the same values, and FlashInfer's paged prefill from the anchors.

Runs on the GPU machine: python3 bench/paged_prefill.py [--lib build/libattn.so] [--out DIR]

The problem is the anchors' "append 512 onto 8k, 16 req" (../shared/anchors, T4): B 16 sequences
of 8192 keys whose last 512 are the new queries, causal bottom-right (`j <= i + kv_len[b] - Sq`),
bf16, D 128, Hq:Hkv 32:8 and 32:32, vLLM's page layout [pages, page, Hk, D] at pages 16 and 64,
each sequence's pages in a shuffled order. FLOPs as the anchors count them: 4 Hq D (q (kv - q) +
q (q + 1) / 2) a sequence. attnc paged runs fwd_sm90 on sm_90a (TMA boxes within pages), and, for
comparison, fwd_sm80 (the graph compiled for sm_90: rows gathered through the page table, what
FP8 caches run); attnc dense is the same graph on [B, Hk, L, D] tensors, on both templates; all
are checked against the first (relative error) before they are timed. FlashInfer is not run in this process (its
kernels must be built ahead with nvcc); its anchor figure is quoted beside, from another run.
Timing as bench/decode.py (CUDA events, calls queued behind a GPU sleep, median of 30).

Then FlashInfer's ragged cases (anchors T4: 8 requests of 512-4096 tokens, 32 of 256-3263; each
request's q_len = kv_len, causal): packed q against paged caches (each request's pages shuffled
over the cache, unused table entries -1), beside attnc's packed varlen graph with k and v packed
(the same values), against which the paged output is checked; and FlashInfer's fa3 paged
prefill in this process on the same tensors when .fi's bundle is installed
(bench/flashinfer_peer.py, tools/prep_flashinfer.sh; a FlashInfer failure is recorded in the row
as fiN_error and attnc's figures stand).
"""
import argparse, json, os, sys, time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, checked_variant, driver_version  # noqa: E402
from decode import time_queued, to_pages  # noqa: E402
import flashinfer_peer  # noqa: E402  (FlashInfer in this process when .fi's bundle is installed)

FI = flashinfer_peer.available()

D = 128
# FlashInfer fa3 paged prefill, "append 512 onto 8k, 16 req" (anchors T4): ms by (Hkv, page).
FI_ANCHOR_MS = {(8, 16): 2.074, (8, 64): 1.985, (32, 16): 1.934, (32, 64): 2.043}


def graph_text(paged):
    kv = "paged(k_cache, page_table)" if paged else "k"
    vv = "paged(v_cache, page_table)" if paged else "v"
    decl = ("    input k_cache : bf16[Pages, Page, Hk, 128];\n    input v_cache : bf16[Pages, Page, Hk, 128];\n"
            "    input page_table : i32[B, MaxPages];\n") if paged else \
           ("    input k : bf16[B, Hk, Skv, 128];\n    input v : bf16[B, Hk, Skv, 128];\n")
    return ("attention pf {\n"
            f"    input q : bf16[B, H, Sq, {D}];\n{decl}    input kv_len : i32[B];\n"
            f"    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = mask((q @ {kv}^T) * scale, j < kv_len[b] && j <= i + kv_len[b] - Sq);\n"
            f"    o = softmax(s) @ {vv};\n"
            f"    output o : bf16[B, H, Sq, {D}];\n}}\n")


def run(attn, dense_mod, dense80_mod, paged_mod, paged80_mod, B, H, Hk, Sq, L, pages=(16, 64), copies=3):
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    sets = []
    for _ in range(copies):
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hk, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        # (the calls hold raw pointers: every tensor they read stays referenced here)
        x = dict(q=q, k=k, v=v, o=o, c=attn.call(dense_mod, "pf", dict(q=q, k=k, v=v, kv_len=lens, o=o)))
        o80 = torch.empty_like(q)
        x["o80"], x["c80"] = o80, attn.call(dense80_mod, "pf", dict(q=q, k=k, v=v, kv_len=lens, o=o80))
        for page in pages:
            perm = torch.randperm(B * L // page, device="cuda")
            kc, vc = to_pages(k, page, perm), to_pages(v, page, perm)
            table = perm.view(B, L // page).to(torch.int32).contiguous()
            op = torch.empty_like(q)
            x[page] = (op, attn.call(paged_mod, "pf", dict(q=q, k_cache=kc, v_cache=vc, page_table=table,
                                                           kv_len=lens, o=op)), kc, vc, table)
            if page == pages[-1]:
                op80 = torch.empty_like(q)
                x["p80"] = (op80, attn.call(paged80_mod, "pf", dict(q=q, k_cache=kc, v_cache=vc,
                                                                    page_table=table, kv_len=lens, o=op80)))
        sets.append(x)
    x = sets[0]
    attn.launch(x["c"])
    attn.launch(x["c80"])
    attn.launch(x["p80"][1])
    for page in pages:
        attn.launch(x[page][1])
    torch.cuda.synchronize()
    flops = B * 4.0 * H * D * (Sq * (L - Sq) + Sq * (Sq + 1) / 2)
    row = dict(Hq=H, Hkv=Hk, B=B, Sq=Sq, L=L, gflop=flops / 1e9)
    for page in pages:
        ref = x["o"].float()
        row[f"paged{page}_rel_err_vs_dense"] = ((x[page][0].float() - ref).norm() / ref.norm()).item()
    row["dense80_rel_err_vs_dense"] = ((x["o80"].float() - ref).norm() / ref.norm()).item()
    row["paged80_rel_err_vs_dense"] = ((x["p80"][0].float() - ref).norm() / ref.norm()).item()
    row["dense_ms"] = time_queued([lambda s=s: attn.launch(s["c"]) for s in sets]) / 1e3
    row["dense80_ms"] = time_queued([lambda s=s: attn.launch(s["c80"]) for s in sets]) / 1e3
    row["paged80_ms"] = time_queued([lambda s=s: attn.launch(s["p80"][1]) for s in sets]) / 1e3
    for page in pages:
        row[f"paged{page}_ms"] = time_queued([lambda s=s, p=page: attn.launch(s[p][1]) for s in sets]) / 1e3
        row[f"paged{page}_vs_dense"] = row["dense_ms"] / row[f"paged{page}_ms"]
        fi = FI_ANCHOR_MS.get((Hk, page))
        row[f"paged{page}_vs_fi_anchor"] = fi / row[f"paged{page}_ms"] if fi else None
    for key in ["dense", "dense80", "paged80"] + [f"paged{p}" for p in pages]:
        row[f"{key}_tflops"] = flops / (row[f"{key}_ms"] * 1e-3) / 1e12
    for s in sets:
        s["c"].close()
        s["c80"].close()
        s["p80"][1].close()
        for page in pages:
            s[page][1].close()
    del sets
    torch.cuda.empty_cache()
    return row


# FlashInfer fa3 ragged paged prefill (anchors T4), ms by (case, Hkv, page).
FI_RAGGED_MS = {("8 req, 16k tok", 8, 16): 0.804, ("32 req x ~1k", 8, 16): 2.622,
                ("8 req, 16k tok", 8, 64): 0.822, ("32 req x ~1k", 8, 64): 2.295,
                ("8 req, 16k tok", 32, 16): 0.813, ("32 req x ~1k", 32, 16): 2.337,
                ("8 req, 16k tok", 32, 64): 0.825, ("32 req x ~1k", 32, 64): 2.517}
RAGGED = [("8 req, 16k tok", [512, 1024, 2048, 4096, 777, 3000, 1500, 3427]),
          ("32 req x ~1k", [256 + 97 * i for i in range(32)])]


def ragged_text(paged):
    kv = ("    input k_cache : bf16[Pages, Page, Hk, 128];\n    input v_cache : bf16[Pages, Page, Hk, 128];\n"
          "    input page_table : i32[B, MaxPages];\n    input kv_len : i32[B];\n") if paged else \
         "    input k : bf16[Tk, Hk, 128];\n    input v : bf16[Tk, Hk, 128];\n"
    kx = "paged(k_cache, page_table)" if paged else "packed(k, cu)"
    vx = "paged(v_cache, page_table)" if paged else "packed(v, cu)"
    m = "j < kv_len[b] && j <= i + kv_len[b] - seqlen_q" if paged else "j <= i + seqlen_k - seqlen_q"
    return ("attention rg {\n"
            f"    input q : bf16[T, H, {D}];\n    input cu : i32[B1];\n{kv}"
            f"    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = mask((packed(q, cu) @ {kx}^T) * scale, {m});\n"
            f"    o = softmax(s) @ {vx};\n    output o : bf16[T, H, {D}];\n}}\n")


def run_ragged(attn, dense_mod, paged_mod, name, lens, H, Hk, pages=(16, 64), copies=2):
    """FlashInfer's ragged prefill cases: packed q (q_len = kv_len, causal) against paged caches,
    beside attnc's packed varlen graph on the same values (k and v packed)."""
    B, T = len(lens), sum(lens)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device="cuda", dtype=torch.int32)
    kv_len = torch.tensor(lens, device="cuda", dtype=torch.int32)
    flops = sum(4.0 * H * D * (a * (a + 1) / 2) for a in lens)
    sets = []
    for _ in range(copies):
        q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(T, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        x = dict(q=q, k=k, v=v, o=o, c=attn.call(dense_mod, "rg", dict(q=q, cu=cu, k=k, v=v, o=o)))
        for page in pages:
            npg = [(l + page - 1) // page for l in lens]
            perm = torch.randperm(sum(npg), device="cuda")
            kc = torch.zeros(sum(npg), page, Hk, D, device="cuda", dtype=torch.bfloat16)
            vc = torch.zeros_like(kc)
            table = torch.full((B, max(npg)), -1, device="cuda", dtype=torch.int32)
            base = 0
            for b, l in enumerate(lens):
                ids = perm[base:base + npg[b]]
                pad = npg[b] * page - l
                for src, dst in ((k, kc), (v, vc)):
                    rows = torch.cat([src[cu[b]:cu[b] + l], src.new_zeros(pad, Hk, D)])
                    dst[ids] = rows.view(npg[b], page, Hk, D)
                table[b, :npg[b]] = ids.to(torch.int32)
                base += npg[b]
            op = torch.empty_like(q)
            x[page] = (op, attn.call(paged_mod, "rg", dict(q=q, cu=cu, k_cache=kc, v_cache=vc,
                                                           page_table=table, kv_len=kv_len, o=op)),
                       kc, vc, table)
            if FI:
                try:
                    x["fi", page] = flashinfer_peer.paged_prefill(q, cu, kc, vc, table, kv_len, page)
                except Exception as ex:  # attnc's rows stand without FlashInfer's
                    x["fi", page] = f"{type(ex).__name__}: {ex}"[:300]
        sets.append(x)
    x = sets[0]
    attn.launch(x["c"])
    for page in pages:
        attn.launch(x[page][1])
    torch.cuda.synchronize()
    row = dict(case=name, Hq=H, Hkv=Hk, B=B, tokens=T, gflop=flops / 1e9)
    ref = x["o"].float()
    for page in pages:
        row[f"paged{page}_rel_err_vs_packed"] = ((x[page][0].float() - ref).norm() / ref.norm()).item()
    for page in (pages if FI else ()):
        failed = [s["fi", page] for s in sets if isinstance(s["fi", page], str)]
        if failed:
            row[f"fi{page}_error"] = failed[0]
            continue
        row[f"fi{page}_rel_err_vs_packed"] = ((x["fi", page]().float() - ref).norm() / ref.norm()).item()
        row[f"fi{page}_ms"] = time_queued([s["fi", page] for s in sets]) / 1e3
        row[f"fi{page}_tflops"] = flops / (row[f"fi{page}_ms"] * 1e-3) / 1e12
    row["packed_ms"] = time_queued([lambda s=s: attn.launch(s["c"]) for s in sets]) / 1e3
    for page in pages:
        row[f"paged{page}_ms"] = time_queued([lambda s=s, p=page: attn.launch(s[p][1]) for s in sets]) / 1e3
        fi = FI_RAGGED_MS.get((name, Hk, page))
        row[f"paged{page}_vs_fi_anchor"] = fi / row[f"paged{page}_ms"] if fi else None
    for key in ["packed"] + [f"paged{p}" for p in pages]:
        row[f"{key}_tflops"] = flops / (row[f"{key}_ms"] * 1e-3) / 1e12
    for s in sets:
        s["c"].close()
        for page in pages:
            s[page][1].close()
    del sets
    torch.cuda.empty_cache()
    return row


def ragged_table(rows):
    out = ["| case | Hq:Hkv | packed dense K/V ms / TFLOP/s | paged 16 ms / TFLOP/s | paged 64 ms / TFLOP/s "
           "| FlashInfer anchor ms (16, 64) | paged 16, 64 / FI anchor | rel. err. vs packed |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = lambda k: f"{r[k + '_ms']:.3f} / {r[k + '_tflops']:.0f}"
        fi = [FI_RAGGED_MS.get((r["case"], r["Hkv"], p)) for p in (16, 64)]
        if "fi16_ms" in r and "fi64_ms" in r:  # FlashInfer measured in this process
            out.append(f"| {r['case']} (FlashInfer, this process) | {r['Hq']}:{r['Hkv']} | - | {c('fi16')} "
                       f"| {c('fi64')} | - | {r['fi16_ms'] / r['paged16_ms']:.2f}, "
                       f"{r['fi64_ms'] / r['paged64_ms']:.2f} (attnc / FI speed) "
                       f"| {max(r['fi16_rel_err_vs_packed'], r['fi64_rel_err_vs_packed']):.1e} |")
        out.append(f"| {r['case']} | {r['Hq']}:{r['Hkv']} | {c('packed')} | {c('paged16')} | {c('paged64')} "
                   f"| {fi[0]}, {fi[1]} | {r['paged16_vs_fi_anchor']:.2f}, {r['paged64_vs_fi_anchor']:.2f} "
                   f"| {max(r['paged16_rel_err_vs_packed'], r['paged64_rel_err_vs_packed']):.1e} |")
    return out


def table(rows):
    out = ["| Hq:Hkv | B x Sq onto L | dense ms / TFLOP/s | paged 16 ms / TFLOP/s | paged 64 ms / TFLOP/s "
           "| paged 16 / dense | paged 64 / dense | FlashInfer anchor ms (16, 64) | paged 16, 64 / FI anchor "
           "| fwd_sm80: dense, paged 64 ms / TFLOP/s | rel. err. vs dense |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = lambda k: f"{r[k + '_ms']:.3f} / {r[k + '_tflops']:.0f}"
        fi = [FI_ANCHOR_MS.get((r["Hkv"], p)) for p in (16, 64)]
        out.append(f"| {r['Hq']}:{r['Hkv']} | {r['B']} x {r['Sq']} onto {r['L']} | {c('dense')} "
                   f"| {c('paged16')} | {c('paged64')} | {r['paged16_vs_dense']:.2f} | {r['paged64_vs_dense']:.2f} "
                   f"| {fi[0]}, {fi[1]} | {r['paged16_vs_fi_anchor']:.2f}, {r['paged64_vs_fi_anchor']:.2f} "
                   f"| {c('dense80')}, {c('paged80')} "
                   f"| {max(r[k] for k in r if k.endswith('_rel_err_vs_dense')):.1e} |")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--variant", default="auto",
                    help="fwd_sm90's variant for every graph (bench.py SM90_VARIANTS): e.g. "
                         "o_smem, which over a paged cache at D 128 trades the third stage for "
                         "O's staging slots (auto stores O from registers there)")
    args = ap.parse_args()
    checked_variant(ap, args.variant)
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    attn = Attn(os.path.abspath(args.lib))
    attn.set_sm90_variant(args.variant)
    dense_mod = attn.compile("pf", graph_text(False))
    paged_mod = attn.compile("pf", graph_text(True))
    attn.set_arch("sm_90")  # the same dense graph on the portable forward, fwd_sm80
    dense80_mod = attn.compile("pf", graph_text(False))
    paged80_mod = attn.compile("pf", graph_text(True))
    rows = []
    for Hk in (8, 32):
        row = run(attn, dense_mod, dense80_mod, paged_mod, paged80_mod, 16, 32, Hk, 512, 8192)
        rows.append(row)
        print(json.dumps(row), flush=True)
    attn.set_arch(None)
    rg_dense = attn.compile("rg", ragged_text(False))
    rg_paged = attn.compile("rg", ragged_text(True))
    rrows = []
    for Hk in (8, 32):
        for name, lens in RAGGED:
            row = run_ragged(attn, rg_dense, rg_paged, name, lens, 32, Hk)
            rrows.append(row)
            print(json.dumps(row), flush=True)
    text = "\n".join([f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; "
                      f"{time.strftime('%Y-%m-%d')}; fwd_sm90 variant {args.variant}", ""] +
                     table(rows) + [""] + ragged_table(rrows))
    print(text)
    os.makedirs(args.out, exist_ok=True)
    tag = "" if args.variant == "auto" else f"-{args.variant}"
    with open(os.path.join(args.out, f"bench-paged-prefill{tag}.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, f"bench-paged-prefill{tag}.json"), "w") as f:
        json.dump(dict(rows=rows, ragged=rrows, sm90_variant=args.variant), f, indent=1)


if __name__ == "__main__":
    main()
