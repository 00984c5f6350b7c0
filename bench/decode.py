"""decode.py: attnc's split-KV decode against cuDNN and FA2 (PyTorch SDPA) in one process.

Runs on the GPU machine: python3 bench/decode.py [--lib build/libattn.so] [--out DIR] [--quick]

The issue's grid: bf16, D 128, Sq = 1, B in {1, 8, 32, 128} x KV length in {1k, 8k, 32k} x
{MHA 32:32, GQA 32:8}, dense [B, H, L, D] caches. Effective bandwidth = K+V bytes / time (the
anchors' convention: bytes read, not read + written). Every configuration is checked against
cuDNN's output before it is timed. Timing as the anchors (../shared/anchors): CUDA events around
each call, all calls queued behind a torch.cuda._sleep so host overhead does not enter, median
of 30 calls after 6 warm-up calls, rotating over enough copies of K and V that the working set
is at least 180 MB (so L2 does not serve a call from the previous one's reads).

--fp8: an e4m3 KV cache (examples/fp8_kv_cache.attn's kind of graph) against the same values in
bf16, attnc on both and cuDNN on bf16 (torch SDPA has no FP8 KV cache), MHA and GQA 32:8, B 1/8/32;
also the same e4m3 values as a paged cache (pages of 64, shuffled): attnc's paged decode and, when
FlashInfer's bundle carries its e4m3 modules (tools/prep_flashinfer.sh), FlashInfer's paged
decode (CUDA-core, and for GQA its tensor-core one) on those pages.

--paged: paged KV caches (examples/paged_kv.attn's kind of graph, vLLM's [pages, page size, Hk, D]
layout, each sequence's pages in a shuffled order) at page sizes 16 and 64 against attnc's dense
decode on the same values, both with the per-sequence length mask (`j < kv_len[b]`) a server's
graph has, and cuDNN dense; the paged output equals the dense one's to the bit where both split
the keys alike (the plan splits a paged cache's decode for three CTAs an SM, a dense one's for
one, so the counts may differ; the relative error column covers those rows). FlashInfer is not run in this process (its kernels must be built ahead with
nvcc: ../shared/tools/anchor_bench2.py prep_fi); RESULTS.md quotes the anchors' FlashInfer paged
decode beside these figures. --hnd takes FlashInfer's HND layout [pages, Hk, page, D]; --ordered
leaves each sequence's pages in order (a fresh cache's placement: what scattering them costs).
Its last columns: the split counts plan_decode_splits' rule gives the dense and the paged graph
(splits_for: a wave of one CTA an SM and of three), and paged 64 timed again with the
dense kernel's count forced (ATTN_OPTION_DECODE_SPLITS): the page gathers' cost apart from the
split count's.

--split-sweep: dense decode (with --paged: over a paged cache, page --page, default 64) at B 1 and 8 (MHA and GQA
32:8, KV 1k-32k) with the split count forced
to each of 1-64 (ATTN_OPTION_DECODE_SPLITS) beside the plan's own choice and cuDNN: where the
plan's rule (one wave of resident CTAs, at least two key tiles a split) leaves time at small
batches (session 43 on an H100: B 1 rows 1-13% behind cuDNN).

Also per configuration: attnc with the decode kernel switched off (ATTN_OPTION_DECODE 0, the
prefill forward kernel), and the split count the plan chose. --rows adds Sq in {2, 4, 8, 16}
at B 8, 8k (speculative decoding: more packed rows per K/V head).
"""
import argparse, json, math, os, statistics, sys, time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, driver_version, write_report  # noqa: E402
import flashinfer_peer  # noqa: E402  (FlashInfer in this process when .fi's bundle is installed)

D = 128


def graph_text(kv="bf16"):
    return ("attention dec {\n"
            f"    input q : bf16[B, H, Sq, {D}];\n    input k : {kv}[B, Hk, Skv, {D}];\n"
            f"    input v : {kv}[B, Hk, Skv, {D}];\n    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            "    s = (q @ k^T) * scale;\n    o = softmax(s) @ v;\n"
            f"    output o : bf16[B, H, Sq, {D}];\n}}\n")


def paged_graph_text(paged, hnd=False, kv_type="bf16"):
    view = "paged_hnd" if hnd else "paged"
    kv = f"{view}(k_cache, page_table)" if paged else "k"
    vv = f"{view}(v_cache, page_table)" if paged else "v"
    dims = "Pages, Hk, Page" if hnd else "Pages, Page, Hk"
    t = kv_type
    decl = (f"    input k_cache : {t}[{dims}, 128];\n    input v_cache : {t}[{dims}, 128];\n"
            "    input page_table : i32[B, MaxPages];\n") if paged else \
           (f"    input k : {t}[B, Hk, Skv, 128];\n    input v : {t}[B, Hk, Skv, 128];\n")
    return ("attention dec {\n"
            f"    input q : bf16[B, H, Sq, {D}];\n{decl}    input kv_len : i32[B];\n"
            f"    scalar scale : f32 = 1.0 / sqrt({D}.0);\n"
            f"    s = mask((q @ {kv}^T) * scale, j < kv_len[b]);\n    o = softmax(s) @ {vv};\n"
            f"    output o : bf16[B, H, Sq, {D}];\n}}\n")


def to_pages(x, page, perm, hnd=False):
    """[B, Hk, L, D] -> [pages, page, Hk, D] (hnd: [pages, Hk, page, D]), sequence b's page p at
    perm[b * L / page + p]."""
    B, Hk, L, Dh = x.shape
    if x.element_size() == 1 and x.dtype != torch.uint8:  # (an FP8 cache: moved as bytes)
        return to_pages(x.view(torch.uint8), page, perm, hnd).view(x.dtype)
    if hnd:
        pages = x.view(B, Hk, L // page, page, Dh).permute(0, 2, 1, 3, 4).reshape(-1, Hk, page, Dh)
    else:
        pages = x.view(B, Hk, L // page, page, Dh).permute(0, 2, 3, 1, 4).reshape(-1, page, Hk, Dh)
    out = torch.empty_like(pages)
    out[perm] = pages
    return out


def paged_copy(attn, paged_mod, q, k, v, lens, page, ordered=False, hnd=False):
    """The same K/V as a paged cache (each sequence's pages shuffled unless ordered) and a call over
    it: (k_cache, v_cache, page_table, o, call)."""
    B, L = k.shape[0], k.shape[2]
    perm = (torch.arange if ordered else torch.randperm)(B * L // page, device="cuda")
    kc, vc = to_pages(k, page, perm, hnd), to_pages(v, page, perm, hnd)
    table = perm.view(B, L // page).to(torch.int32).contiguous()
    op = torch.empty_like(q)
    return kc, vc, table, op, attn.call(paged_mod, "dec", dict(q=q, k_cache=kc, v_cache=vc,
                                                              page_table=table, kv_len=lens, o=op))


def run_paged(attn, dense_mod, paged_mod, B, H, Hk, L, pages=(16, 64), hnd=False, ordered=False,
              fi=False):
    """attnc dense (length-masked) against paged caches of the same values, and cuDNN dense."""
    kv_bytes = 2 * B * Hk * L * D * 2
    copies = max(1, min(45, math.ceil(180e6 / kv_bytes)))
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    sets = []
    for _ in range(copies):
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hk, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        x = dict(q=q, k=k, v=v, o=o, c=attn.call(dense_mod, "dec", dict(q=q, k=k, v=v, kv_len=lens, o=o)))
        for page in pages:
            x[page] = paged_copy(attn, paged_mod, q, k, v, lens, page, ordered, hnd)
            kc, vc, table = x[page][:3]
            if fi:  # FlashInfer's CUDA-core paged decode, and for GQA its tensor-core one
                for tc in ((False, True) if H != Hk else (False,)):
                    try:
                        x["fi", page, tc] = flashinfer_peer.paged_decode(q, kc, vc, table, lens, page,
                                                                         tensor_cores=tc, hnd=hnd)
                    except Exception as ex:  # attnc's rows stand without FlashInfer's
                        x["fi", page, tc] = f"{type(ex).__name__}: {ex}"[:300]
        sets.append(x)
    x = sets[0]
    attn.launch(x["c"])
    for page in pages:
        attn.launch(x[page][4])
    ref = sdpa(x["q"], x["k"], x["v"], SDPBackend.CUDNN_ATTENTION)
    torch.cuda.synchronize()
    row = dict(Hq=H, Hkv=Hk, B=B, L=L, kv_mb=kv_bytes / 1e6, copies=copies,
               rel_err_vs_cudnn=((x["o"].float() - ref.float()).norm() / ref.float().norm()).item())
    for page in pages:
        # (equal bits where both take the same split count; the plan splits a paged graph's
        # decode for three CTAs an SM and a dense one's for one, so the counts may differ)
        row[f"paged{page}_bits_equal_dense"] = bool(torch.equal(x[page][3], x["o"]))
        row[f"paged{page}_rel_err_vs_dense"] = ((x[page][3].float() - x["o"].float()).norm() /
                                                x["o"].float().norm()).item()
    row["dense_us"] = time_queued([lambda s=s: attn.launch(s["c"]) for s in sets])
    for page in pages:
        row[f"paged{page}_us"] = time_queued([lambda s=s, p=page: attn.launch(s[p][4]) for s in sets])
    row["cudnn_us"] = time_queued([lambda s=s: sdpa(s["q"], s["k"], s["v"], SDPBackend.CUDNN_ATTENTION)
                                   for s in sets])
    for key in ["dense", "cudnn"] + [f"paged{p}" for p in pages]:
        row[f"{key}_gbs"] = kv_bytes / (row[f"{key}_us"] * 1e-6) / 1e9
    for (tag, page, tc), fn in [(k, v) for k, v in x.items() if isinstance(k, tuple)]:
        name = f"fi{'_tc' if tc else ''}{page}"
        failed = [s[tag, page, tc] for s in sets if isinstance(s[tag, page, tc], str)]
        if failed:
            row[name + "_error"] = failed[0]
            continue
        of = fn()
        row[name + "_rel_err_vs_dense"] = ((of.float() - x["o"].float()).norm() / x["o"].float().norm()).item()
        row[name + "_us"] = time_queued([s[tag, page, tc] for s in sets])
        row[name + "_gbs"] = kv_bytes / (row[name + "_us"] * 1e-6) / 1e9
    # Paged 64 again at the dense kernel's split count, the page gathers' cost apart from the
    # split count's. (The plan splits a paged cache's decode for a wave of three CTAs an SM, a
    # dense one's for one: session 44 took one for both, session 46 gave paged its wave back.)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    row["dense_splits"] = splits_for(B, H, Hk, 1, L, sms)
    row["paged_splits"] = splits_for(B, H, Hk, 1, L, sms, wave=3)
    attn.set_option("decode_splits", row["dense_splits"])
    try:
        row["paged64_dense_splits_us"] = time_queued([lambda s=s: attn.launch(s[64][4]) for s in sets])
    finally:
        attn.set_option("decode_splits", 0)
    for page in pages:
        row[f"paged{page}_vs_dense"] = row["dense_us"] / row[f"paged{page}_us"]
    for s in sets:
        s["c"].close()
        for page in pages:
            s[page][4].close()
    del sets
    torch.cuda.empty_cache()
    return row


def fi_best(r, page):
    """FlashInfer's faster paged decode (CUDA-core or tensor-core) at this page size, or '-'."""
    us = [r[k] for k in (f"fi{page}_us", f"fi_tc{page}_us") if k in r]
    return f"{min(us):.1f} / {max(r[k] for k in (f'fi{page}_gbs', f'fi_tc{page}_gbs') if k in r):.0f}" if us else "-"


def paged_table(rows):
    out = ["| Hq:Hkv | B | KV len | K+V MB | attnc dense us / GB/s | paged 16 us / GB/s | paged 64 us / GB/s "
           "| paged 16 / dense | paged 64 / dense | cuDNN dense us / GB/s | paged 64 / cuDNN | bits = dense "
           "| rel. err. vs dense | FlashInfer page 64 us / GB/s (best kernel, this process) "
           "| splits dense / paged | paged 64 at dense's splits / dense |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = lambda k: f"{r[k + '_us']:.1f} / {r[k + '_gbs']:.0f}"
        out.append(f"| {r['Hq']}:{r['Hkv']} | {r['B']} | {r['L'] // 1024}k | {r['kv_mb']:.0f} | {c('dense')} "
                   f"| {c('paged16')} | {c('paged64')} | {r['paged16_vs_dense']:.3f} | {r['paged64_vs_dense']:.3f} "
                   f"| {c('cudnn')} | {r['cudnn_us'] / r['paged64_us']:.2f} "
                   f"| {'yes' if r['paged16_bits_equal_dense'] and r['paged64_bits_equal_dense'] else 'no'} "
                   f"| {max(r['paged16_rel_err_vs_dense'], r['paged64_rel_err_vs_dense']):.1e} "
                   f"| {fi_best(r, 64)} | {r['dense_splits']} / {r['paged_splits']} "
                   f"| {r['dense_us'] / r['paged64_dense_splits_us']:.3f} |")
    return out


def time_queued(fns, calls=30, warm=6):
    """Median microseconds of one call, the calls queued behind a GPU sleep."""
    for n in range(warm):
        fns[n % len(fns)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time: the host queues everything meanwhile
    for n in range(calls):
        starts[n].record()
        fns[n % len(fns)]()
        ends[n].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def sdpa(q, k, v, backend):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def dense_sets(attn, mod, B, H, Hk, L, Sq=1):
    """K+V bytes, and enough copies of a dense bf16 problem (q, k, v, o, the call) that the working
    set is at least 180 MB (no call reads the previous one's K and V from L2)."""
    kv_bytes = 2 * B * Hk * L * D * 2
    copies = max(1, min(45, math.ceil(180e6 / kv_bytes)))
    if kv_bytes * copies > 90e9:
        copies = 1
    sets = []
    for _ in range(copies):
        q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hk, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        sets.append((q, k, v, o, attn.call(mod, "dec", dict(q=q, k=k, v=v, o=o))))
    return kv_bytes, sets


def run(attn, mod, sms, B, H, Hk, L, Sq=1):
    kv_bytes, sets = dense_sets(attn, mod, B, H, Hk, L, Sq)
    copies = len(sets)
    q, k, v, o, c = sets[0]
    attn.launch(c)
    ref = sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION)
    torch.cuda.synchronize()
    err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
    row = dict(Hq=H, Hkv=Hk, B=B, L=L, Sq=Sq, kv_mb=kv_bytes / 1e6, copies=copies,
               rel_err_vs_cudnn=err)
    row["attnc_us"] = time_queued([lambda c=c: attn.launch(c) for *_, c in sets])
    attn.set_option("launch_overlap", 0)  # the same kernels, launched plainly
    row["attnc_plain_us"] = time_queued([lambda c=c: attn.launch(c) for *_, c in sets])
    attn.set_option("launch_overlap", 1)
    attn.set_option("decode", 0)
    row["attnc_fwd_us"] = time_queued([lambda c=c: attn.launch(c) for *_, c in sets])
    attn.set_option("decode", 1)
    row["cudnn_us"] = time_queued([lambda s=s: sdpa(s[0], s[1], s[2], SDPBackend.CUDNN_ATTENTION)
                                   for s in sets])
    try:
        row["fa2_us"] = time_queued([lambda s=s: sdpa(s[0], s[1], s[2], SDPBackend.FLASH_ATTENTION)
                                     for s in sets])
    except RuntimeError as e:  # FA2 through SDPA may refuse a shape
        row["fa2_us"], row["fa2_error"] = None, str(e)[:120]
    for key in ("attnc", "attnc_plain", "attnc_fwd", "cudnn", "fa2"):
        t = row[f"{key}_us"]
        row[f"{key}_gbs"] = kv_bytes / (t * 1e-6) / 1e9 if t else None
    row["splits"] = splits_for(B, H, Hk, Sq, L, sms)
    row["ratio_vs_cudnn"] = row["cudnn_us"] / row["attnc_us"]
    for *_, c in sets:
        c.close()
    del sets
    torch.cuda.empty_cache()
    return row


SWEEP_SPLITS = (1, 2, 4, 8, 16, 32, 64)


def run_split_sweep(attn, mod, sms, B, H, Hk, L, paged_mod=None, page=64):
    """attnc's dense decode at each forced split count (ATTN_OPTION_DECODE_SPLITS; 0 the plan's
    own choice) beside cuDNN, on the same tensors: where the plan's split rule (compiler/plan.c,
    plan_decode_splits) leaves time at small batches. Every split count's output is checked
    against cuDNN's first. With paged_mod (paged_graph_text(True)): attnc's decode over the same
    values as a paged cache of this page size instead of the dense sets' calls, the question
    being whether a paged cache wants more splits than a dense one (session 46: paged B 1 at
    8k-32k 13-22% behind dense at the same count, H100)."""
    kv_bytes, sets = dense_sets(attn, mod, B, H, Hk, L)
    if paged_mod is not None:
        lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
        kept = []  # the caches and lens, alive until the sweep ends: a call holds addresses only
        for n, (q, k, v, o, c) in enumerate(sets):
            c.close()
            kc, vc, table, op, cp = paged_copy(attn, paged_mod, q, k, v, lens, page)
            kept.append((kc, vc, table))
            sets[n] = (q, k, v, op, cp)
    wave = 3 if paged_mod is not None else 1
    row = dict(Hq=H, Hkv=Hk, B=B, L=L, kv_mb=kv_bytes / 1e6,
               plan_splits=splits_for(B, H, Hk, 1, L, sms, wave=wave))
    q, k, v, o, c = sets[0]
    ref = sdpa(q, k, v, SDPBackend.CUDNN_ATTENTION).float()
    row["cudnn_us"] = time_queued([lambda s=s: sdpa(s[0], s[1], s[2], SDPBackend.CUDNN_ATTENTION)
                                   for s in sets])
    try:
        for n in (0,) + SWEEP_SPLITS:
            if n > max(1, L // 64):  # (the plan caps a split at one key tile of 64)
                continue
            attn.set_option("decode_splits", n)
            attn.launch(c)
            torch.cuda.synchronize()
            err = ((o.float() - ref).norm() / ref.norm()).item()
            if err > 2e-2:
                raise RuntimeError(f"splits {n}: rel err {err:.1e} against cuDNN")
            row[f"us_{n}"] = time_queued([lambda c=c: attn.launch(c) for *_, c in sets])
    finally:
        attn.set_option("decode_splits", 0)
    best = min(SWEEP_SPLITS, key=lambda n: row.get(f"us_{n}", float("inf")))
    row["best_splits"], row["best_us"] = best, row[f"us_{best}"]
    for *_, c in sets:
        c.close()
    del sets
    torch.cuda.empty_cache()
    return row


def split_sweep_table(rows):
    head = " | ".join(f"{n} splits" for n in SWEEP_SPLITS)
    out = [f"| Hq:Hkv | B | KV len | plan's splits | plan us | {head} | best | cuDNN us | plan us / best us |",
           "|" + "---|" * (8 + len(SWEEP_SPLITS))]
    for r in rows:
        cells = " | ".join(f"{r[f'us_{n}']:.1f}" if f"us_{n}" in r else "-" for n in SWEEP_SPLITS)
        out.append(f"| {r['Hq']}:{r['Hkv']} | {r['B']} | {r['L'] // 1024}k | {r['plan_splits']} | "
                   f"{r['us_0']:.1f} | {cells} | {r['best_splits']} | {r['cudnn_us']:.1f} | "
                   f"{r['us_0'] / r['best_us']:.3f} |")
    return out


def run_fp8(attn, mod8, mod16, mod8p, B, H, Hk, L, page=64, fi=False):
    """An e4m3 KV cache against the same values in bf16: attnc on each, cuDNN on bf16; the e4m3
    values as shuffled pages: attnc's paged decode (mod8p, length-masked) and FlashInfer's."""
    kv8_bytes = 2 * B * Hk * L * D
    copies = max(1, min(45, math.ceil(180e6 / kv8_bytes)))
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    sets = []
    for _ in range(copies):
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k8, v8 = (torch.randn(B, Hk, L, D, device="cuda").to(torch.float8_e4m3fn) for _ in range(2))
        k16, v16 = k8.to(torch.bfloat16), v8.to(torch.bfloat16)
        o8, o16, op = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
        perm = torch.randperm(B * L // page, device="cuda")
        kc, vc = to_pages(k8, page, perm), to_pages(v8, page, perm)
        table = perm.view(B, L // page).to(torch.int32).contiguous()
        # Every tensor stays in the dict: the calls hold their addresses, not references.
        x = dict(q=q, k8=k8, v8=v8, k16=k16, v16=v16, o8=o8, o16=o16, op=op, kc=kc, vc=vc, table=table,
                 c8=attn.call(mod8, "dec", dict(q=q, k=k8, v=v8, o=o8)),
                 c16=attn.call(mod16, "dec", dict(q=q, k=k16, v=v16, o=o16)),
                 cp=attn.call(mod8p, "dec", dict(q=q, k_cache=kc, v_cache=vc, page_table=table,
                                                 kv_len=lens, o=op)))
        if fi:  # FlashInfer's CUDA-core paged decode, and for GQA its tensor-core one
            for tc in ((False, True) if H != Hk else (False,)):
                try:
                    x["fi", tc] = flashinfer_peer.paged_decode(q, kc, vc, table, lens, page, tensor_cores=tc)
                except Exception as ex:  # attnc's columns stand without FlashInfer's
                    x["fi", tc] = f"{type(ex).__name__}: {ex}"[:300]
        sets.append(x)
    x = sets[0]
    attn.launch(x["c8"])
    attn.launch(x["cp"])
    ref = sdpa(x["q"], x["k16"], x["v16"], SDPBackend.CUDNN_ATTENTION)
    torch.cuda.synchronize()

    def err(o):
        return ((o.float() - ref.float()).norm() / ref.float().norm()).item()
    row = dict(Hq=H, Hkv=Hk, B=B, L=L, kv8_mb=kv8_bytes / 1e6, copies=copies, page=page,
               rel_err_vs_cudnn_bf16=err(x["o8"]), paged_rel_err_vs_cudnn_bf16=err(x["op"]))
    row["attnc_fp8_us"] = time_queued([lambda s=s: attn.launch(s["c8"]) for s in sets])
    row["attnc_bf16_us"] = time_queued([lambda s=s: attn.launch(s["c16"]) for s in sets])
    row["attnc_fp8_paged_us"] = time_queued([lambda s=s: attn.launch(s["cp"]) for s in sets])
    row["cudnn_bf16_us"] = time_queued([lambda s=s: sdpa(s["q"], s["k16"], s["v16"], SDPBackend.CUDNN_ATTENTION)
                                        for s in sets])
    for tc in [k[1] for k in x if isinstance(k, tuple)]:
        name = "fi_tc" if tc else "fi"
        failed = [s["fi", tc] for s in sets if isinstance(s["fi", tc], str)]
        if failed:
            row[name + "_error"] = failed[0]
            continue
        row[name + "_rel_err_vs_cudnn_bf16"] = err(x["fi", tc]())
        row[name + "_us"] = time_queued([s["fi", tc] for s in sets])
    row["attnc_fp8_gbs"] = kv8_bytes / (row["attnc_fp8_us"] * 1e-6) / 1e9
    row["speedup_vs_attnc_bf16"] = row["attnc_bf16_us"] / row["attnc_fp8_us"]
    row["speedup_vs_cudnn_bf16"] = row["cudnn_bf16_us"] / row["attnc_fp8_us"]
    fi_us = [row[k] for k in ("fi_us", "fi_tc_us") if k in row]
    if fi_us:
        row["fi_best_us"] = min(fi_us)
        row["paged_vs_fi"] = row["fi_best_us"] / row["attnc_fp8_paged_us"]
    for s in sets:
        for c in ("c8", "c16", "cp"):
            s[c].close()
    del sets
    torch.cuda.empty_cache()
    return row


def fp8_table(rows):
    out = ["| Hq:Hkv | B | KV len | e4m3 K+V MB | attnc e4m3 us / GB/s | attnc bf16 us | cuDNN bf16 us "
           "| e4m3 / attnc bf16 | e4m3 / cuDNN bf16 | attnc e4m3 paged 64 us | FlashInfer e4m3 paged 64 us "
           "(CUDA-core / tensor-core) | attnc paged / FlashInfer | rel err vs cuDNN (same values: dense, paged) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fi = " / ".join(f"{r[k]:.1f}" if k in r else "-" for k in ("fi_us", "fi_tc_us"))
        vs = f"{r['paged_vs_fi']:.2f}x" if "paged_vs_fi" in r else "-"
        out.append(f"| {r['Hq']}:{r['Hkv']} | {r['B']} | {r['L'] // 1024}k | {r['kv8_mb']:.0f} "
                   f"| {r['attnc_fp8_us']:.1f} / {r['attnc_fp8_gbs']:.0f} | {r['attnc_bf16_us']:.1f} "
                   f"| {r['cudnn_bf16_us']:.1f} | {r['speedup_vs_attnc_bf16']:.2f}x "
                   f"| {r['speedup_vs_cudnn_bf16']:.2f}x | {r['attnc_fp8_paged_us']:.1f} | {fi} | {vs} "
                   f"| {r['rel_err_vs_cudnn_bf16']:.1e}, {r['paged_rel_err_vs_cudnn_bf16']:.1e} |")
    return out


def splits_for(B, H, Hk, Sq, L, sms, bn=64, wave=1):
    """plan_decode_splits (compiler/plan.c), for the table: the split count the plan chose.
    wave: the CTAs an SM resident, 1 over a dense cache, 3 over a paged one at D 128 (the graph
    line's wave=, `attnc plan`); a paged cache's splits make two of them an SM (session 48)."""
    tiles = -(-L // bn)
    if tiles <= 1:
        return 1
    items = B * Hk * -(-(H // Hk) * Sq // 16)
    if wave > 1:
        slots = sms * 2  # (wave > 1 here: two fit)
        if items >= slots:
            return 1
        n = slots // items
    else:
        if items * 3 > sms:
            return 1
        n = sms // items
    return max(1, min(n, tiles // 2, 128))


def table(rows):
    out = ["| Hq:Hkv | B | Sq | KV len | K+V MB | splits | attnc decode us / GB/s | not overlapped us / GB/s "
           "| attnc forward kernel us / GB/s | cuDNN us / GB/s | FA2 us / GB/s | attnc / cuDNN | rel err vs cuDNN |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def cell(k):
            return "-" if r[f"{k}_us"] is None else f"{r[f'{k}_us']:.1f} / {r[f'{k}_gbs']:.0f}"
        out.append(f"| {r['Hq']}:{r['Hkv']} | {r['B']} | {r['Sq']} | {r['L'] // 1024}k | {r['kv_mb']:.0f} "
                   f"| {r['splits']} | {cell('attnc')} | {cell('attnc_plain')} | {cell('attnc_fwd')} "
                   f"| {cell('cudnn')} | {cell('fa2')} "
                   f"| {r['ratio_vs_cudnn']:.2f} | {r['rel_err_vs_cudnn']:.1e} |")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="B 1 and 32 only")
    ap.add_argument("--rows", action="store_true", help="also Sq 2..16 at B 8, 8k")
    ap.add_argument("--fp8", action="store_true", help="only the e4m3 KV cache grid")
    ap.add_argument("--paged", action="store_true", help="only the paged KV cache grid")
    ap.add_argument("--hnd", action="store_true", help="--paged with FlashInfer's HND pages [pages, Hk, page, D]")
    ap.add_argument("--ordered", action="store_true",
                    help="--paged with each sequence's pages in order (the default shuffles them)")
    ap.add_argument("--split-sweep", action="store_true",
                    help="dense decode at B 1 and 8 at every forced split count, beside cuDNN")
    ap.add_argument("--page", type=int, default=64,
                    help="--split-sweep --paged: the cache's page size (default 64)")
    ap.add_argument("--config", default=None,
                    help="one configuration, HQ:HKV,B,L[,SQ] (e.g. 32:8,1,8192), for profiling")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    attn = Attn(os.path.abspath(args.lib))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    mod = attn.compile("dec", graph_text())
    rows = []
    if args.fp8:
        mod8 = attn.compile("dec", graph_text("e4m3"))
        mod8p = attn.compile("decp", paged_graph_text(True, kv_type="e4m3"))
        fi = flashinfer_peer.available()
    if args.fp8 and args.config:  # one configuration, for profiling
        heads, B, L = args.config.split(",")[:3]
        H, Hk = (int(x) for x in heads.split(":"))
        print(json.dumps(run_fp8(attn, mod8, mod, mod8p, int(B), H, Hk, int(L), fi=fi)), flush=True)
        return
    if args.paged and not args.split_sweep:
        dense_mod = attn.compile("dec", paged_graph_text(False))
        paged_mod = attn.compile("dec", paged_graph_text(True, args.hnd))
        for Hk in (8, 32):
            for B in ((1, 32) if args.quick else (1, 8, 32, 128)):
                for L in (1024, 8192, 32768):
                    if 2 * B * Hk * L * D * 2 > 20e9:  # dense and paged copies side by side
                        continue
                    row = run_paged(attn, dense_mod, paged_mod, B, 32, Hk, L, hnd=args.hnd,
                                    ordered=args.ordered, fi=flashinfer_peer.available())
                    row["layout"] = "hnd" if args.hnd else "nhd"
                    row["pages_in_order"] = args.ordered
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        text = "\n".join([f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; "
                          f"cuDNN {torch.backends.cudnn.version()}; {time.strftime('%Y-%m-%d')}", ""] +
                         paged_table(rows))
        name = "bench-decode-paged" + ("-hnd" if args.hnd else "") + ("-ordered" if args.ordered else "")
        write_report(args.out, name, text, dict(rows=rows))
        return
    if args.fp8:
        for Hk in (8, 32):
            for B in ((1, 32) if args.quick else (1, 8, 32)):
                for L in (1024, 8192, 32768):
                    row = run_fp8(attn, mod8, mod, mod8p, B, 32, Hk, L, fi=fi)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        text = "\n".join([f"GPU: {torch.cuda.get_device_name()}; {time.strftime('%Y-%m-%d')}", ""] +
                         fp8_table(rows))
        write_report(args.out, "bench-decode-fp8", text, dict(rows=rows))
        return
    if args.split_sweep:
        # --paged: over a paged cache of pages of --page (shuffled)
        paged_mod = attn.compile("decp", paged_graph_text(True)) if args.paged else None
        for Hk in (8, 32):
            for B in (1, 8):
                for L in (1024, 8192, 32768):
                    row = run_split_sweep(attn, mod, sms, B, 32, Hk, L, paged_mod, args.page)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        what = f"Paged (page {args.page}, shuffled)" if args.paged else "Dense"
        text = "\n".join([f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; "
                          f"cuDNN {torch.backends.cudnn.version()}; {time.strftime('%Y-%m-%d')}", "",
                          f"{what} bf16 decode, D 128, Sq 1; attnc at forced split counts "
                          "(ATTN_OPTION_DECODE_SPLITS), us, one process.", ""] +
                         split_sweep_table(rows))
        write_report(args.out, "bench-decode-splits" + (f"-paged{args.page}" if args.paged else ""), text,
                     dict(rows=rows))
        return
    if args.config:
        heads, B, L, *sq = args.config.split(",")
        H, Hk = (int(x) for x in heads.split(":"))
        row = run(attn, mod, sms, int(B), H, Hk, int(L), int(sq[0]) if sq else 1)
        print(json.dumps(row), flush=True)
        return
    for Hk in (8, 32):
        for B in ((1, 32) if args.quick else (1, 8, 32, 128)):
            for L in (1024, 8192, 32768):
                row = run(attn, mod, sms, B, 32, Hk, L)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.rows:
        for Hk in (8, 32):
            for Sq in (2, 4, 8, 16):
                row = run(attn, mod, sms, 8, 32, Hk, 8192, Sq)
                rows.append(row)
                print(json.dumps(row), flush=True)
    mod.close()
    lines = [f"GPU: {torch.cuda.get_device_name()}; driver {driver_version()}; torch {torch.__version__}; "
             f"cuDNN {torch.backends.cudnn.version()}; {time.strftime('%Y-%m-%d')}", ""] + table(rows)
    write_report(args.out, "bench-decode", "\n".join(lines),
                 dict(rows=rows, device=torch.cuda.get_device_name()))


if __name__ == "__main__":
    main()
