#!/usr/bin/env python3
"""compile_sweep.py: random-graph sweep of the promise "every graph that `attnc check` accepts
either compiles (NVRTC, sm_80 and sm_90a) or is refused with a located reason".

    python3 tools/compile_sweep.py [--attnc build/attnc] [--out DIR] [--seed N]
                                   [--minutes 30 | --count N] [--jobs 1] [--arch sm_80,sm_90a]
                                   [--timeout 120] [--check-only] [--no-minimize] [--only I]

Each graph is generated from (seed, index) alone, so `--seed S --only I` regenerates graph I of a
run exactly. Graphs combine the language's features (docs/language.md): head dims (multiples of 16
from 32 to 256, a few of 8, q/k and v apart as MLA's 192/128), input dtypes (bf16, f16, e4m3,
e5m2, FP8 KV caches), output dtypes (bf16, f16, f32, FP8 with a scale), GQA/MQA, Sq != Skv,
score modifications (scale, softcap, biases read several ways, relative positions, ALiBi,
other pointwise math), masks (causal, bottom-right, windows, bands, documents, padding, sink
tokens, disjunctions, chunks, prefix-LM, global offsets, per-element tensors), softmax sinks,
dropout, P scaled and rounded to FP8, amax and lse outputs, grad (with and without grad blocks),
paged KV caches, packed sequences and packed queries against paged caches.

For each graph: `attnc check FILE`; if accepted, `attnc compile FILE --arch A --part P -o X.cubin
-v` (ATTN_NO_CACHE=1) for each arch and P in prefill, decode and (with grad) backward. Outcomes:
  accepted / refused (located: FILE:LINE:COL: error:) by check;
  ok (exit 0 and a CUDA ELF) / refused (exit 1 and a located error) per compile;
  FAILURE: anything else (NVRTC or ptxas errors, crashes, timeouts, unlocated errors, exit
  statuses other than the documented ones, "internal error").
WARNINGS: ptxas's "wgmma.mma_async instructions are serialized" remarks (C75xx) under -v.
Per-graph results go to OUT/results.jsonl as they finish; the summary to stdout (and
OUT/summary.txt); failing graphs (and a minimized copy, where a feature-by-feature reduction
keeps the failure) to OUT/failures/.
"""
import argparse, copy, json, os, re, shutil, signal, subprocess, sys, tempfile, threading, time
import random
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FLOAT16 = ["bf16", "f16"]
FP8 = ["e4m3", "e5m2"]


# ---------------------------------------------------------------------------------------------
# Generation: a spec (a dict of features, JSON-serializable) drawn from an rng, then rendered.
# Every feature can be switched off in a copy of the spec (the minimizer does that), and render
# copes with any combination.
# ---------------------------------------------------------------------------------------------

def pick(rng, choices):
    """choices: list of (weight, value)."""
    tot = sum(w for w, _ in choices)
    x = rng.random() * tot
    for w, v in choices:
        x -= w
        if x < 0:
            return v
    return choices[-1][1]


MASK_KINDS = ["causal", "causal_br", "window", "window_br", "band", "doc", "padding", "sink_window",
              "disj", "chunked", "prefix_lm", "offsets", "strided", "bool_tensor", "float_tensor",
              "kv_len", "kv_len_causal", "cu_len", "i_only", "u64_len"]
MOD_KINDS = ["softcap", "bias", "rel", "alibi", "softplus_alibi", "logsigmoid", "clamp", "where_diag",
             "temp_bh", "sigmoid_mix", "div_tau", "head_scale", "max_floor", "exp_log"]


def gen_spec(rng):
    sp = {}
    sp["mode"] = pick(rng, [(62, "dense"), (14, "paged"), (14, "packed"), (10, "packed_paged")])
    # head dims
    d16 = [32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256]
    D = pick(rng, [(3, 64), (3, 128), (1, 256), (6, rng.choice(d16))])
    if rng.random() < 0.06:
        D = rng.choice([40, 56, 72, 88, 104, 120, 136, 200, 248])  # multiples of 8 (16-bit only)
    Dv = D
    r = rng.random()
    if r < 0.10:
        D, Dv = 192, 128
    elif r < 0.22:
        Dv = rng.choice(d16)
    sp["D"], sp["Dv"] = D, Dv
    # dtypes
    sp["qdt"], sp["kvdt"] = pick(rng, [
        (30, ("bf16", "bf16")), (14, ("f16", "f16")), (10, ("e4m3", "e4m3")), (6, ("e5m2", "e5m2")),
        (5, ("e5m2", "e4m3")), (4, ("e4m3", "e5m2")), (8, ("bf16", "e4m3")), (4, ("bf16", "e5m2")),
        (4, ("f16", "e4m3")), (2, ("f16", "bf16")), (2, ("bf16", "f16"))])
    # heads
    sp["H"] = pick(rng, [(6, "H"), (1, "8"), (1, "16"), (1, "32"), (1, "64")])
    if sp["H"] == "H":
        sp["Hk"] = pick(rng, [(5, "same"), (3, "Hk"), (1, "1")])
    else:
        h = int(sp["H"])
        divs = [d for d in (1, 2, 4, 8, 16, 32, 64) if h % d == 0 and d <= h]
        sp["Hk"] = pick(rng, [(4, "same"), (3, str(rng.choice(divs))), (1, "Hk")])
    sp["seq"] = pick(rng, [(1, "same"), (2, "diff")])
    sp["self_cu"] = rng.random() < 0.4  # packed: one offsets tensor for q and k
    sp["page_layout"] = pick(rng, [(3, "nhd"), (1, "hnd")])
    sp["inline_views"] = rng.random() < 0.4
    # scale
    sp["scale"] = pick(rng, [(5, "scalar"), (2, "literal"), (1, "left"), (1, "div")])
    sp["descale_qk"] = sp["qdt"] in FP8 or sp["kvdt"] in FP8 and rng.random() < 0.7
    # score modifications
    mods = []
    for _ in range(pick(rng, [(4, 0), (4, 1), (2, 2), (1, 3)])):
        kind = pick(rng, [(4, "softcap"), (4, "bias"), (2, "rel"), (3, "alibi"), (1, "softplus_alibi"),
                          (1, "logsigmoid"), (1, "clamp"), (1, "where_diag"), (1, "temp_bh"),
                          (1, "sigmoid_mix"), (1, "div_tau"), (1, "head_scale"), (1, "max_floor"),
                          (1, "exp_log")])
        if kind in [m["kind"] for m in mods]:
            continue
        m = {"kind": kind}
        if kind == "softcap":
            m["cap"] = pick(rng, [(2, "scalar"), (1, "literal")])
            m["val"] = rng.choice([20.0, 30.0, 50.0])
        elif kind == "bias":
            m["shape"] = pick(rng, [(4, "bhij"), (2, "1hij"), (2, "hij"), (1, "ij"), (1, "b1ij"),
                                    (1, "bij")])
            m["dt"] = pick(rng, [(3, "f32"), (3, "bf16"), (2, "f16"), (1, "e4m3")])
        elif kind == "rel":
            m["form"] = pick(rng, [(2, "clamp"), (1, "raw")])
            m["dt"] = pick(rng, [(2, "f32"), (1, "bf16")])
        elif kind == "alibi":
            m["form"] = pick(rng, [(2, "sub"), (1, "f32"), (1, "abs")])
        mods.append(m)
    sp["mods"] = mods
    # masks
    masks = []
    if sp["mode"] in ("paged", "packed_paged") and rng.random() < 0.85:
        masks.append(pick(rng, [(1, "kv_len"), (2, "kv_len_causal")]))
    nm = pick(rng, [(3, 0), (5, 1), (3, 2), (1, 3)])
    for _ in range(nm):
        k = pick(rng, [(5, "causal"), (4, "causal_br"), (3, "window"), (2, "window_br"), (2, "band"),
                       (2, "doc"), (2, "padding"), (2, "sink_window"), (2, "disj"), (1, "chunked"),
                       (1, "prefix_lm"), (1, "offsets"), (1, "strided"), (1, "bool_tensor"),
                       (1, "float_tensor"), (1, "cu_len"), (1, "i_only"), (1, "u64_len")])
        if k not in masks:
            masks.append(k)
    sp["masks"] = masks
    sp["mask_style"] = pick(rng, [(4, "and"), (2, "nested"), (2, "stmts"), (1, "or2"), (1, "inline")])
    sp["window"] = rng.choice([64, 128, 256, 1000, 4096])
    sp["window_form"] = pick(rng, [(2, "scalar"), (1, "literal")])
    # softmax
    sp["sink"] = pick(rng, [(8, None), (2, "h"), (1, "bh"), (1, "scalar")])
    sp["dropout"] = None
    if rng.random() < 0.18:
        sp["dropout"] = {"rate": pick(rng, [(2, "scalar"), (1, "literal")]),
                         "seed": pick(rng, [(2, "u64"), (1, "i32"), (1, "literal")]),
                         "offset": pick(rng, [(2, "u64"), (1, "literal")])}
    fp8ish = sp["qdt"] in FP8 or sp["kvdt"] in FP8
    sp["pround"] = pick(rng, [(6 if not fp8ish else 3, None), (2 if fp8ish else 1, "e4m3"),
                              (1 if fp8ish else 0.3, "e5m2")])
    sp["pscale"] = sp["pround"] is not None and rng.random() < 0.85 or rng.random() < 0.05
    sp["pscale_val"] = pick(rng, [(3, 448.0), (1, 256.0), (1, 49152.0), (1, 1.0)])
    sp["descale_v"] = sp["kvdt"] in FP8 and rng.random() < 0.8
    sp["post"] = pick(rng, [(12, None), (1, "gate_h"), (1, "tanh"), (1, "add_const"), (1, "gate_bh")])
    # outputs
    if fp8ish:
        sp["odt"] = pick(rng, [(3, "bf16"), (3, "e4m3"), (1, "e5m2"), (1, "f16"), (1, "f32"),
                               (1, "default")])
    else:
        sp["odt"] = pick(rng, [(5, "q"), (1, "bf16"), (1, "f16"), (1, "f32"), (1, "e4m3"),
                               (1, "default")])
    sp["oscale"] = sp["odt"] in FP8 and rng.random() < 0.85
    sp["oname"] = pick(rng, [(9, "o"), (1, "out"), (1, "y")])
    sp["amax_o"] = rng.random() < (0.5 if fp8ish else 0.1)
    sp["lse"] = rng.random() < 0.6
    sp["lse_typed"] = rng.random() < 0.15
    sp["chain_style"] = pick(rng, [(3, "named"), (2, "inline")])
    # grad
    sp["grad"] = None
    gprob = 0.45 if sp["mode"] in ("dense", "packed") else 0.05
    if rng.random() < gprob:
        names = [n for n in ("q", "k", "v") if rng.random() < 0.85] or ["q"]
        if rng.random() < 0.7:
            names = ["q", "k", "v"]
        extra = []
        if rng.random() < 0.5:
            extra.append("bias")
        if rng.random() < 0.5:
            extra.append("sinks")
        if rng.random() < 0.4:
            extra.append("slopes")
        if rng.random() < 0.1:
            extra.append("rel")
        sp["grad"] = {"names": names, "extra": extra}
        if sp["grad"] and not sp["lse"] and rng.random() < 0.93:
            sp["lse"] = True
        if fp8ish or sp["pround"] or rng.random() < 0.25:
            if rng.random() < 0.95:
                sp["grad"]["block"] = gen_block(rng)
    return sp


def gen_block(rng):
    b = {}
    b["do_dt"] = pick(rng, [(3, "e5m2"), (3, "e4m3"), (1, "bf16"), (1, None)])
    b["do_scale"] = pick(rng, [(3, "scalar"), (1, "literal"), (1, None)])
    b["amax_dp"] = rng.random() < 0.6
    b["ds_round"] = pick(rng, [(3, "e5m2"), (3, "e4m3"), (1, None)])
    b["ds_scale"] = pick(rng, [(3, "scalar"), (1, "literal")])
    b["outs"] = {}
    for n in ("q", "k", "v"):
        b["outs"][n] = {"dt": pick(rng, [(3, "bf16"), (3, "e4m3"), (1, "e5m2"), (1, "f32"), (1, "f16"),
                                         (1, None)]),
                        "scale": pick(rng, [(3, "scalar"), (1, "literal"), (1, None)]),
                        "amax": rng.random() < 0.5}
    b["ds_expr"] = pick(rng, [(6, "round"), (1, "clamp")])
    return b


class R:
    """The text of one graph being rendered: declarations, statements, outputs."""

    def __init__(self):
        self.inputs = []   # (name, decl)
        self.scalars = []  # (name, decl)
        self.stmts = []
        self.outs = []
        self.tail = []
        self.names = set()

    def inp(self, name, decl):
        if name not in self.names:
            self.names.add(name)
            self.inputs.append((name, f"input {name} : {decl};"))
        return name

    def scal(self, name, decl):
        if name not in self.names:
            self.names.add(name)
            self.scalars.append((name, f"scalar {name} : {decl};"))
        return name


def flt(x):
    s = repr(float(x))
    return s if ("." in s or "e" in s) else s + ".0"


def render(sp, name):
    r = R()
    mode = sp["mode"]
    D, Dv = sp["D"], sp["Dv"]
    qdt, kvdt = sp["qdt"], sp["kvdt"]
    H = sp["H"]
    Hk = H if sp["Hk"] == "same" else sp["Hk"]
    Sq, Skv = ("S", "S") if sp["seq"] == "same" else ("Sq", "Skv")
    packed_q = mode in ("packed", "packed_paged")
    paged = mode in ("paged", "packed_paged")
    packed_kv = mode == "packed"
    # the attention operands
    if packed_q:
        if mode == "packed" and sp["self_cu"]:
            Tq = Tk = "T"
            cuq = cuk = r.inp("cu", "i32[B1]")
        else:
            Tq, Tk = ("T", "Tk") if mode == "packed" else ("T", None)
            cuq = r.inp("cu_q", "i32[B1]")
            cuk = r.inp("cu_k", "i32[B1]") if mode == "packed" else None
        qn = "q" if (mode == "packed_paged" and sp["inline_views"]) else "q_tokens"
        qt = r.inp(qn, f"{qdt}[{Tq}, {H}, {D}]")
        qexpr = f"packed({qt}, {cuq})"
        qgrad = qt
    else:
        qt = r.inp("q", f"{qdt}[B, {H}, {Sq}, {D}]")
        qexpr = "q"
        qgrad = "q"
    if paged:
        fn = "paged" if sp["page_layout"] == "nhd" else "paged_hnd"
        def cache(n, d):
            if sp["page_layout"] == "nhd":
                return r.inp(n, f"{kvdt}[Pages, PageSize, {Hk}, {d}]")
            return r.inp(n, f"{kvdt}[Pages, {Hk}, PageSize, {d}]")
        kc, vc = cache("k_cache", D), cache("v_cache", Dv)
        pt = r.inp("page_table", "i32[B, MaxPages]")
        kexpr, vexpr = f"{fn}({kc}, {pt})", f"{fn}({vc}, {pt})"
        kgrad, vgrad = kc, vc
    elif packed_kv:
        kt = r.inp("k_tokens", f"{kvdt}[{Tk}, {Hk}, {D}]")
        vt = r.inp("v_tokens", f"{kvdt}[{Tk}, {Hk}, {Dv}]")
        kexpr, vexpr = f"packed({kt}, {cuk})", f"packed({vt}, {cuk})"
        kgrad, vgrad = kt, vt
    else:
        r.inp("k", f"{kvdt}[B, {Hk}, {Skv}, {D}]")
        r.inp("v", f"{kvdt}[B, {Hk}, {Skv}, {Dv}]")
        kexpr, vexpr = "k", "v"
        kgrad, vgrad = "k", "v"
    if qexpr != "q" or kexpr != "k":
        if not sp["inline_views"]:
            if qexpr != "q":
                r.stmts.append(f"q = {qexpr};")
                qexpr = "q"
            if kexpr != "k":
                r.stmts.append(f"k = {kexpr};")
                r.stmts.append(f"v = {vexpr};")
                kexpr, vexpr = "k", "v"
    # lengths seen by masks
    if paged:
        KL = r.inp("kv_len", "i32[B]") and "kv_len[b]"
    elif packed_kv:
        KL = "seqlen_k"
    else:
        KL = Skv
    QL = "seqlen_q" if packed_q else Sq
    Hdim = H

    # the score
    sc = sp["scale"]
    fac = flt(1.0 / (D ** 0.5))
    if sc in ("scalar", "left"):
        r.scal("scale", f"f32 = 1.0 / sqrt({flt(D)})")
        fac = "scale"
    if sp["descale_qk"]:
        r.scal("descale_q", "f32 = 1.0")
        r.scal("descale_k", "f32 = 0.5")
        fac = f"({fac} * descale_q * descale_k)"
    qk = f"({qexpr} @ {kexpr}^T)"
    if sc == "left":
        score = f"{fac} * {qk}"
    elif sc == "div":
        score = f"{qk} / {flt(D ** 0.5)}" if not sp["descale_qk"] else f"{qk} / {flt(D ** 0.5)} * descale_q * descale_k"
    else:
        score = f"{qk} * {fac}"
    # mask conditions
    conds = []
    for mk in sp["masks"]:
        c = mask_cond(mk, sp, r, QL, KL, Sq, Skv, Hdim, packed_q, paged, cuk if packed_kv else None)
        if c:
            conds.append(c)
    inline_mask = sp["mask_style"] == "inline" and conds
    if inline_mask:
        score = f"mask({score}, {' && '.join(conds)})"
        conds = []
    r.stmts.append(f"s = {score};")
    # modifications
    grad_extra_ok = {}
    for m in sp["mods"]:
        k = m["kind"]
        if k == "softcap":
            cap = flt(m["val"])
            if m["cap"] == "scalar":
                r.scal("softcap", f"f32 = {cap}")
                cap = "softcap"
            r.stmts.append(f"s = {cap} * tanh(s / {cap});")
        elif k == "bias":
            shp = m["shape"]
            if packed_q or paged:
                BS, QS, KS = "B", "Sq", "Skv"
            else:
                BS, QS, KS = "B", Sq, Skv
            decl, read = {
                "bhij": (f"[{BS}, {Hdim}, {QS}, {KS}]", "bias[b, h, i, j]"),
                "1hij": (f"[1, {Hdim}, {QS}, {KS}]", "bias[b, h, i, j]"),
                "hij": (f"[{Hdim}, {QS}, {KS}]", "bias[h, i, j]"),
                "ij": (f"[{QS}, {KS}]", "bias[i, j]"),
                "b1ij": (f"[{BS}, 1, {QS}, {KS}]", "bias[b, h, i, j]"),
                "bij": (f"[{BS}, {QS}, {KS}]", "bias[b, i, j]"),
            }[shp]
            r.inp("bias", f"{m['dt']}{decl}")
            r.stmts.append(f"s = s + {read};")
            grad_extra_ok["bias"] = m["dt"]
        elif k == "rel":
            if m["form"] == "clamp":
                r.inp("rel", f"{m['dt']}[{Hdim}, 256]")
                r.stmts.append("s = s + rel[h, clamp(j - i + 128, 0, 255)];")
            else:
                r.inp("rel", f"{m['dt']}[{Hdim}, 4095]")
                r.stmts.append("s = s + rel[h, i - j + 2047];")
            grad_extra_ok["rel"] = m["dt"]
        elif k == "alibi":
            r.inp("slopes", f"f32[{Hdim}]")
            r.stmts.append({"sub": "s = s - slopes[h] * (i - j);",
                            "f32": "s = s + slopes[h] * f32(j - i);",
                            "abs": "s = s - slopes[h] * abs(i - j);"}[m["form"]])
            grad_extra_ok["slopes"] = "f32"
        elif k == "softplus_alibi":
            r.inp("raw_slope", f"f32[{Hdim}]")
            r.stmts.append("s = s - softplus(raw_slope[h]) * f32(i - j);")
            grad_extra_ok["raw_slope"] = "f32"
        elif k == "logsigmoid":
            r.stmts.append("s = -softplus(-s);")
        elif k == "clamp":
            r.stmts.append("s = clamp(s, -30.0, 30.0);")
        elif k == "where_diag":
            r.stmts.append("s = where(j == i, s + 1.0, s);")
        elif k == "temp_bh":
            r.inp("temp", f"f32[B, {Hdim}]")
            r.stmts.append("s = s * temp[b, h];")
            grad_extra_ok["temp"] = "f32"
        elif k == "sigmoid_mix":
            r.stmts.append("s = s + 0.5 * sigmoid(s);")
        elif k == "div_tau":
            r.scal("tau", "f32 = 2.0")
            r.stmts.append("s = s / tau;")
        elif k == "head_scale":
            r.stmts.append("s = s * (1.0 + f32(h) * 0.01);")
        elif k == "max_floor":
            r.stmts.append("s = max(s, -10000.0);")
        elif k == "exp_log":
            r.stmts.append("s = log(exp(s * 0.5) + 1.0) * 2.0;")
    # masks
    if conds:
        st = sp["mask_style"]
        if st == "nested" and len(conds) > 1:
            e = "s"
            for c in conds:
                e = f"mask({e}, {c})"
            r.stmts.append(f"s = {e};")
        elif st == "stmts":
            for c in conds:
                r.stmts.append(f"s = mask(s, {c});")
        elif st == "or2" and len(conds) > 1:
            r.stmts.append(f"s = mask(s, ({conds[0]}) || ({' && '.join(conds[1:])}));")
        else:
            r.stmts.append(f"s = mask(s, {' && '.join(conds)});")
    # softmax, dropout, P
    sink = None
    if sp["sink"] == "h":
        r.inp("sinks", f"f32[{Hdim}]")
        r.stmts.append("sk = sinks[h];")
        sink = "sk"
        grad_extra_ok["sinks"] = "f32"
    elif sp["sink"] == "bh":
        r.inp("sinks", f"f32[B, {Hdim}]")
        r.stmts.append("sk = sinks[b, h];")
        sink = "sk"
        grad_extra_ok["sinks"] = "f32"
    elif sp["sink"] == "scalar":
        r.scal("sink_logit", "f32 = 0.5")
        r.stmts.append("sk = sink_logit;")
        sink = "sk"
    sm = f"softmax(s, {sink})" if sink else "softmax(s)"
    inline = sp["chain_style"] == "inline"
    if not inline:
        r.stmts.append(f"p = {sm};")
        pe = "p"
    else:
        pe = sm
    if sp["dropout"]:
        dd = sp["dropout"]
        rate = "0.1"
        if dd["rate"] == "scalar":
            rate = r.scal("rate", "f32 = 0.125")
        seed = "7"
        if dd["seed"] == "u64":
            seed = r.scal("seed", "u64 = 1234")
        elif dd["seed"] == "i32":
            seed = r.scal("seed", "i32 = -5")
        off = "3"
        if dd["offset"] == "u64":
            off = r.scal("offset", "u64 = 0")
        pe = f"dropout({pe}, {rate}, {seed}, {off})"
        if not inline:
            r.stmts.append(f"p = {pe};")
            pe = "p"
    ssv = flt(sp["pscale_val"])
    if sp["pscale"]:
        r.scal("scale_s", f"f32 = {ssv}")
        pe = f"{pe} * scale_s"
    if sp["pround"]:
        pe = f"{sp['pround']}({pe})"
    pv = f"({pe} @ {vexpr})"
    post = []
    if sp["descale_v"]:
        r.scal("descale_v", "f32 = 2.0")
        post.append("descale_v")
    if sp["pscale"]:
        post.append("/ scale_s")
    out = pv
    if post:
        mul = [x for x in post if not x.startswith("/")]
        div = [x for x in post if x.startswith("/")]
        if mul and div:
            out = f"{pv} * ({mul[0]} / scale_s)"
        elif mul:
            out = f"{pv} * {mul[0]}"
        else:
            out = f"{pv} / scale_s"
    if sp["post"] == "gate_h":
        r.inp("gate", f"f32[{Hdim}]")
        out = f"{out} * gate[h]"
    elif sp["post"] == "tanh":
        out = f"tanh({out})"
    elif sp["post"] == "gate_bh":
        r.inp("gate_bh", f"f32[B, {Hdim}]")
        out = f"{out} * gate_bh[b, h]"
    elif sp["post"] == "add_const":
        out = f"{out} + 0.25"
    oname = sp["oname"]
    # outputs
    if packed_q:
        oshape = f"[{'T'}, {H}, {Dv}]"
    else:
        oshape = f"[B, {H}, {Sq}, {Dv}]"
    odt = sp["odt"]
    if odt == "q":
        odt = qdt
    need_out_var = sp["amax_o"] or sp["oscale"]
    lse_expr = f"logsumexp(s, {sink})" if sink else "logsumexp(s)"
    if need_out_var:
        r.stmts.append(f"out_v = {out};")
        ov = "out_v"
        if odt == "default":
            r.outs.append(f"output {oname} = {ov}{' * scale_o' if sp['oscale'] else ''};")
        else:
            if sp["oscale"]:
                r.scal("scale_o", "f32 = 4.0")
            r.outs.append(f"output {oname} : {odt}{oshape} = {ov}{' * scale_o' if sp['oscale'] else ''};")
        if sp["oscale"] and odt == "default":
            r.scal("scale_o", "f32 = 4.0")
        if sp["amax_o"]:
            r.outs.append(f"output amax_o = amax({ov});")
    else:
        r.stmts.append(f"{oname} = {out};")
        if odt == "default":
            r.outs.append(f"output {oname};")
        else:
            r.outs.append(f"output {oname} : {odt}{oshape};")
    if sp["lse"]:
        if sp["lse_typed"]:
            lshape = f"[{H}, T]" if packed_q else f"[B, {H}, {Sq}]"
            r.outs.append(f"output lse : f32{lshape} = {lse_expr};")
        else:
            r.outs.append(f"output lse = {lse_expr};")
    # grad
    if sp["grad"]:
        g = sp["grad"]
        names = [{"q": qgrad, "k": kgrad, "v": vgrad}[n] for n in g["names"]]
        for e in g.get("extra", []):
            if e == "slopes" and "raw_slope" in grad_extra_ok:
                e = "raw_slope"
            if e in grad_extra_ok and grad_extra_ok[e] in ("f32", "bf16", "f16") and e not in names:
                names.append(e)
        blk = g.get("block")
        if not blk:
            r.tail.append(f"grad {', '.join(names)};")
        else:
            lines = []
            dname = "d" + oname
            if blk["do_dt"]:
                lines.append(f"input {dname} : {blk['do_dt']};")
            if blk["do_scale"] == "scalar":
                lines.insert(0, "scalar descale_do : f32 = 0.5;")
                lines.append(f"{dname} = {dname} * descale_do;")
            elif blk["do_scale"] == "literal":
                lines.append(f"{dname} = {dname} * 0.25;")
            if blk["amax_dp"]:
                lines.append("output amax_dp = amax(ds);")
            if blk["ds_round"]:
                dsv = "256.0"
                if blk["ds_scale"] == "scalar":
                    lines.insert(0, "scalar scale_dp : f32 = 256.0;")
                    dsv = "scale_dp"
                if blk.get("ds_expr") == "clamp":
                    lines.append(f"ds = clamp(ds, -1.0, 1.0);")
                else:
                    lines.append(f"ds = {blk['ds_round']}(ds * {dsv}) / {dsv};")
            for n, gn in (("q", qgrad), ("k", kgrad), ("v", vgrad)):
                if gn not in names:
                    continue
                o = blk["outs"][n]
                dn = "d" + gn
                val = ""
                if o["scale"] == "scalar":
                    lines.insert(0, f"scalar scale_{dn} : f32 = 2.0;")
                    val = f" = {dn} * scale_{dn}"
                elif o["scale"] == "literal":
                    val = f" = {dn} * 8.0"
                typ = f" : {o['dt']}" if o["dt"] else ""
                lines.append(f"output {dn}{typ}{val};")
                if o["amax"]:
                    lines.append(f"output amax_{dn} = amax({dn});")
            r.tail.append(f"grad {', '.join(names)} {{")
            r.tail += ["  " + x for x in lines]
            r.tail.append("}")
    # assemble
    lines = [f"# generated by tools/compile_sweep.py", f"# spec: {json.dumps(sp, sort_keys=True)}",
             f"attention {name} {{"]
    for _, d in r.inputs:
        lines.append("  " + d)
    for _, d in r.scalars:
        lines.append("  " + d)
    lines.append("")
    for st in r.stmts:
        lines.append("  " + st)
    lines.append("")
    for st in r.outs:
        lines.append("  " + st)
    for st in r.tail:
        lines.append("  " + st)
    lines.append("}")
    return "\n".join(lines) + "\n"


def mask_cond(mk, sp, r, QL, KL, Sq, Skv, Hdim, packed_q, paged, cuk):
    br = f"i + {KL} - {QL}"  # bottom-right aligned query position
    def window():
        if sp["window_form"] == "scalar":
            return r.scal("window", f"i32 = {sp['window']}")
        return str(sp["window"])
    if mk == "causal":
        return "j <= i"
    if mk == "causal_br":
        return f"j <= {br}"
    if mk == "window":
        return f"j <= i && j > i - {window()}"
    if mk == "window_br":
        return f"j <= {br} && {br} - j < {window()}"
    if mk == "band":
        return f"abs(i - j) <= {window()}"
    if mk == "doc":
        if Sq == Skv and not packed_q and not paged:
            r.inp("doc", f"i32[B, {Sq}]")
            return "doc[b, i] == doc[b, j]"
        r.inp("doc_q", "i32[B, Sq]" if (packed_q or paged) else f"i32[B, {Sq}]")
        r.inp("doc_k", "i32[B, Skv]" if (packed_q or paged) else f"i32[B, {Skv}]")
        return "doc_q[b, i] == doc_k[b, j]"
    if mk == "padding":
        r.inp("len_q", "i32[B]")
        r.inp("len_k", "i32[B]")
        return "i < len_q[b] && j < len_k[b]"
    if mk == "u64_len":
        r.inp("len_k64", "u64[B]")
        return "u64(j) < len_k64[b]" if False else "j < len_k64[b]"
    if mk == "sink_window":
        r.scal("sink_tokens", "i32 = 4")
        return f"j <= {br} && (j < sink_tokens || {br} - j < {window()})"
    if mk == "disj":
        return f"(j < 4 || j > i - {window()})"
    if mk == "chunked":
        r.scal("chunk", "i32 = 512")
        return "i / chunk == j / chunk && j <= i"
    if mk == "prefix_lm":
        r.inp("prefix", "i32[B]")
        return "(j <= i || j < prefix[b])"
    if mk == "offsets":
        r.scal("q0", "i32 = 0")
        r.scal("k0", "i32 = 0")
        return "j + k0 <= i + q0"
    if mk == "strided":
        return "(j % 8 == 0 || j <= i)"
    if mk == "bool_tensor":
        if packed_q or paged:
            r.inp("keep", f"bool[B, {Hdim}, Sq, Skv]")
        else:
            r.inp("keep", f"bool[B, {Hdim}, {Sq}, {Skv}]")
        return "keep[b, h, i, j]"
    if mk == "float_tensor":
        r.inp("kscore", "f32[B, Skv]" if (packed_q or paged) else f"f32[B, {Skv}]")
        return "kscore[b, j] > 0.5"
    if mk == "kv_len":
        if not paged:
            return None
        return "j < kv_len[b]"
    if mk == "kv_len_causal":
        if not paged:
            return None
        return f"j < kv_len[b] && j <= i + kv_len[b] - {QL}"
    if mk == "cu_len":
        if cuk is None:
            return None
        return f"j < {cuk}[b + 1] - {cuk}[b]"
    if mk == "i_only":
        return "i >= 0 && i % 2 == 0 || j == 0"
    return None


# ---------------------------------------------------------------------------------------------
# Minimizer: switch features off one at a time while the failure keeps its signature.
# ---------------------------------------------------------------------------------------------

def simplifications(sp):
    out = []
    def mk(desc, f):
        s = copy.deepcopy(sp)
        f(s)
        if s != sp:
            out.append((desc, s))
    for idx in range(len(sp["mods"])):
        mk(f"drop mod {sp['mods'][idx]['kind']}", lambda s, idx=idx: s["mods"].pop(idx))
    for idx in range(len(sp["masks"])):
        mk(f"drop mask {sp['masks'][idx]}", lambda s, idx=idx: s["masks"].pop(idx))
    mk("no sink", lambda s: s.update(sink=None))
    mk("no dropout", lambda s: s.update(dropout=None))
    mk("no P rounding", lambda s: s.update(pround=None))
    mk("no P scale", lambda s: s.update(pscale=False))
    mk("no descale_v", lambda s: s.update(descale_v=False))
    mk("no descale_qk", lambda s: s.update(descale_qk=False))
    mk("no post op", lambda s: s.update(post=None))
    mk("no amax_o", lambda s: s.update(amax_o=False))
    mk("out dtype bf16", lambda s: s.update(odt="bf16", oscale=False))
    mk("out name o", lambda s: s.update(oname="o"))
    mk("scale scalar", lambda s: s.update(scale="scalar"))
    mk("no grad", lambda s: s.update(grad=None))
    if sp["grad"]:
        mk("no grad block", lambda s: s["grad"].pop("block", None))
        mk("no grad extras", lambda s: s["grad"].update(extra=[]))
        mk("grad q,k,v", lambda s: s["grad"].update(names=["q", "k", "v"]))
        if sp["grad"].get("block"):
            b = sp["grad"]["block"]
            mk("block: no amax_dp", lambda s: s["grad"]["block"].update(amax_dp=False))
            mk("block: no ds rounding", lambda s: s["grad"]["block"].update(ds_round=None))
            mk("block: no do scale", lambda s: s["grad"]["block"].update(do_scale=None))
            for n in ("q", "k", "v"):
                mk(f"block: d{n} no amax", lambda s, n=n: s["grad"]["block"]["outs"][n].update(amax=False))
                mk(f"block: d{n} no scale", lambda s, n=n: s["grad"]["block"]["outs"][n].update(scale=None))
                mk(f"block: d{n} bf16", lambda s, n=n: s["grad"]["block"]["outs"][n].update(dt="bf16"))
    mk("no lse", lambda s: s.update(lse=False))
    mk("lse untyped", lambda s: s.update(lse_typed=False))
    mk("Hk same", lambda s: s.update(Hk="same"))
    mk("H symbolic", lambda s: s.update(H="H", Hk="same" if s["Hk"] == "same" else "Hk"))
    mk("same seq", lambda s: s.update(seq="same"))
    mk("Dv = D", lambda s: s.update(Dv=s["D"]))
    mk("D 128", lambda s: s.update(D=128, Dv=128))
    mk("D 64", lambda s: s.update(D=64, Dv=64))
    mk("bf16 inputs", lambda s: s.update(qdt="bf16", kvdt="bf16"))
    mk("kv like q", lambda s: s.update(kvdt=s["qdt"]))
    mk("q like kv", lambda s: s.update(qdt=s["kvdt"]))
    mk("mask style and", lambda s: s.update(mask_style="and"))
    mk("chain named", lambda s: s.update(chain_style="named"))
    mk("views named", lambda s: s.update(inline_views=False))
    mk("dense", lambda s: s.update(mode="dense"))
    return out


# ---------------------------------------------------------------------------------------------
# Running attnc
# ---------------------------------------------------------------------------------------------

LOCATED = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$", re.M)
SERIAL = re.compile(r"wgmma\.mma_async instructions are serialized", re.I)


def run_cmd(cmd, timeout, env=None):
    t0 = time.time()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = p.communicate()
            rc = None
            timed_out = True
    except OSError as e:
        return {"rc": None, "stdout": "", "stderr": str(e), "timed_out": False, "secs": 0.0}
    return {"rc": rc, "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
            "timed_out": timed_out, "secs": round(time.time() - t0, 2)}


def located_in(stderr, path):
    for m in LOCATED.finditer(stderr):
        if m.group("file") == path:
            return m.group(0)
    return None


def normalize(line):
    line = re.sub(r"graph '[^']*'", "graph 'G'", line)
    line = re.sub(r"g\d+_\d+", "G", line)
    line = re.sub(r"\bfailure\d+_min", "G", line)
    line = re.sub(r"/\S+?\.attn", "FILE", line)
    line = re.sub(r"\S+\.attn", "FILE", line)
    line = re.sub(r"\(\d+\)", "(N)", line)
    line = re.sub(r"0x[0-9a-fA-F]+", "0xN", line)
    line = re.sub(r"\b\d+\b", "N", line)
    return line.strip()[:200]


def key_error(stderr):
    """The line that says what went wrong, for the failure's signature."""
    lines = stderr.splitlines()
    for pat in (r"internal error", r"\): error", r"ptxas.*error", r"error\b", r"Sanitizer", r"Assert",
                r"assert", r"fatal"):
        for ln in lines:
            if re.search(pat, ln):
                return ln
    return lines[-1] if lines else ""


def classify_check(res, path):
    if res["timed_out"]:
        return "FAILURE", "check: timeout"
    rc, err = res["rc"], res["stderr"]
    if "internal error" in err.lower():
        return "FAILURE", "check: " + normalize(key_error(err))
    if rc == 0:
        return "accepted", None
    if rc == 1 and located_in(err, path):
        return "refused", None
    if rc is not None and rc < 0:
        return "FAILURE", f"check: signal {-rc}"
    return "FAILURE", f"check: exit {rc}: " + normalize(key_error(err))


def is_cuda_elf(path):
    try:
        with open(path, "rb") as f:
            h = f.read(20)
        return len(h) == 20 and h[:4] == b"\x7fELF" and int.from_bytes(h[18:20], "little") == 190
    except OSError:
        return False


def classify_compile(res, path, cubin):
    if res["timed_out"]:
        return "FAILURE", "timeout"
    rc, err = res["rc"], res["stderr"]
    if "internal error" in err.lower():
        return "FAILURE", "internal: " + normalize(key_error(err))
    if rc == 0:
        if is_cuda_elf(cubin):
            return "ok", None
        return "FAILURE", "exit 0 without a CUDA ELF cubin"
    if rc == 1 and located_in(err, path):
        return "refused", None
    if rc is not None and rc < 0:
        return "FAILURE", f"crash: signal {-rc}"
    if "NVRTC failed" in err:
        stage = "ptxas" if re.search(r"ptxas.*(error|fatal)", err, re.I) else "nvrtc"
        return "FAILURE", f"{stage}: " + normalize(key_error(err.split("NVRTC failed", 1)[1]))
    return "FAILURE", f"exit {rc}: " + normalize(key_error(err))


def serialized(stderr):
    out = []
    fn = None
    for ln in stderr.splitlines():
        m = re.search(r"Function properties for (\S+)|Compiling entry function '([^']+)'", ln)
        if m:
            fn = m.group(1) or m.group(2)
        if SERIAL.search(ln):
            m = re.search(r"in the function '([^']+)'", ln)
            out.append(((m.group(1) if m else fn) or "?", ln.strip()))
    return out


class Sweep:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.results = []
        self.failures = {}   # signature -> list of records
        self.warnings = {}   # signature -> list of records
        self.log = open(os.path.join(a.out, "results.jsonl"), "a")
        self.env = dict(os.environ, ATTN_NO_CACHE="1")

    def graph_path(self, idx):
        return os.path.join(self.a.out, "graphs", f"g{self.a.seed}_{idx:05d}.attn")

    def make(self, idx):
        rng = random.Random(f"{self.a.seed}:{idx}")
        sp = gen_spec(rng)
        return sp

    def compile_cmd(self, path, arch, part, cubin):
        return [self.a.attnc, "compile", path, "--arch", arch, "--part", part, "-o", cubin, "-v"]

    def run_one_compile(self, path, arch, part, tmp):
        cubin = os.path.join(tmp, f"{arch}.{part}.cubin")
        if os.path.exists(cubin):
            os.unlink(cubin)
        cmd = self.compile_cmd(path, arch, part, cubin)
        res = run_cmd(cmd, self.a.timeout, self.env)
        cls, sig = classify_compile(res, path, cubin)
        return cmd, res, cls, sig

    def do_graph(self, idx):
        sp = self.make(idx)
        path = self.graph_path(idx)
        name = f"g{self.a.seed}_{idx}"
        with open(path, "w") as f:
            f.write(render(sp, name))
        rec = {"idx": idx, "file": path, "mode": sp["mode"], "grad": bool(sp["grad"]),
               "check": None, "compiles": []}
        res = run_cmd([self.a.attnc, "check", path], self.a.timeout)
        cls, sig = classify_check(res, path)
        rec["check"] = cls
        if cls == "refused":
            rec["check_msg"] = located_in(res["stderr"], path)
        if cls == "FAILURE":
            self.add_failure(sig, {"file": path, "cmd": [self.a.attnc, "check", path], "res": res,
                                   "spec": sp, "arch": None, "part": "check"})
        if cls == "accepted" and not self.a.check_only:
            parts = ["prefill", "decode"] + (["backward"] if sp["grad"] else [])
            with tempfile.TemporaryDirectory() as tmp:
                for arch in self.a.arch.split(","):
                    for part in parts:
                        cmd, res, ccls, csig = self.run_one_compile(path, arch, part, tmp)
                        c = {"arch": arch, "part": part, "class": ccls, "secs": res["secs"]}
                        if ccls == "refused":
                            c["msg"] = located_in(res["stderr"], path)
                        if ccls == "FAILURE":
                            c["sig"] = csig
                            self.add_failure(csig, {"file": path, "cmd": cmd, "res": res, "spec": sp,
                                                    "arch": arch, "part": part})
                        for fn, ln in serialized(res["stderr"]):
                            code = re.search(r"\(C\d+\)", ln)
                            wsig = f"{code.group(0) if code else '(C?)'} {normalize(fn)} {arch}/{part}"
                            c.setdefault("warnings", []).append(ln)
                            self.add_warning(wsig, {"file": path, "cmd": cmd, "arch": arch,
                                                    "part": part, "line": ln, "fn": fn})
                        rec["compiles"].append(c)
        with self.lock:
            self.results.append(rec)
            self.log.write(json.dumps(rec) + "\n")
            self.log.flush()
            if self.a.progress:
                n = len(self.results)
                acc = sum(1 for x in self.results if x["check"] == "accepted")
                nf = sum(len(v) for v in self.failures.values())
                print(f"[{time.strftime('%H:%M:%S')}] graph {idx}: check {cls}"
                      + "".join(f" {c['arch']}/{c['part']}={c['class']}" for c in rec["compiles"])
                      + f"  (total {n}, accepted {acc}, failures {nf})", flush=True)
        return rec

    def add_failure(self, sig, item):
        with self.lock:
            self.failures.setdefault(sig, []).append(item)

    def add_warning(self, sig, item):
        with self.lock:
            self.warnings.setdefault(sig, []).append(item)

    # -- minimization ------------------------------------------------------------------------
    def reproduce(self, sp, arch, part, sig, tmpdir, tag):
        path = os.path.join(tmpdir, f"min_{tag}.attn")
        with open(path, "w") as f:
            f.write(render(sp, "minimized"))
        res = run_cmd([self.a.attnc, "check", path], self.a.timeout)
        cls, csig = classify_check(res, path)
        if part == "check":
            return cls == "FAILURE" and csig == sig
        if cls != "accepted":
            return False
        cubin = os.path.join(tmpdir, "min.cubin")
        cmd = self.compile_cmd(path, arch, part, cubin)
        res = run_cmd(cmd, self.a.timeout, self.env)
        ccls, s2 = classify_compile(res, path, cubin)
        return ccls == "FAILURE" and s2 == sig

    def minimize(self, item, sig, budget):
        sp = copy.deepcopy(item["spec"])
        steps = []
        tries = 0
        with tempfile.TemporaryDirectory() as tmp:
            changed = True
            while changed and tries < budget and time.time() < self.min_deadline:
                changed = False
                for desc, cand in simplifications(sp):
                    if tries >= budget or time.time() >= self.min_deadline:
                        break
                    tries += 1
                    if self.reproduce(cand, item["arch"], item["part"], sig, tmp, tries):
                        sp = cand
                        steps.append(desc)
                        changed = True
                        break
        return sp, steps, tries


def show(cmd):
    """A command as the summary prints it: the cubin to a fixed path."""
    cmd = list(cmd)
    if "-o" in cmd:
        cmd[cmd.index("-o") + 1] = "/tmp/sweep_repro.cubin"
    return " ".join(cmd)


def summarize(sw, a, started, fout):
    def p(*x):
        print(*x)
        print(*x, file=fout)
    R_ = sw.results
    n = len(R_)
    acc = [r for r in R_ if r["check"] == "accepted"]
    ref = [r for r in R_ if r["check"] == "refused"]
    p(f"\n==== compile_sweep summary: seed {a.seed}, {n} graphs in {(time.time() - started) / 60:.1f} min ====")
    p(f"attnc check: accepted {len(acc)} ({100.0 * len(acc) / max(n, 1):.0f}%), refused (located) {len(ref)},"
      f" FAILURE {sum(1 for r in R_ if r['check'] == 'FAILURE')}")
    modes = {}
    for r in R_:
        m = modes.setdefault(r["mode"], [0, 0])
        m[0] += 1
        m[1] += r["check"] == "accepted"
    p("by mode (generated/accepted): " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(modes.items())))
    if not a.check_only:
        p("\n| arch | part | ok | refused (located) | FAILURE | warnings |")
        p("|---|---|---|---|---|---|")
        for arch in a.arch.split(","):
            for part in ("prefill", "decode", "backward"):
                cs = [c for r in acc for c in r["compiles"] if c["arch"] == arch and c["part"] == part]
                if not cs:
                    continue
                p(f"| {arch} | {part} | {sum(c['class'] == 'ok' for c in cs)} | "
                  f"{sum(c['class'] == 'refused' for c in cs)} | {sum(c['class'] == 'FAILURE' for c in cs)} | "
                  f"{sum(1 for c in cs if c.get('warnings'))} |")
        # the refusals' messages, grouped
        msgs = {}
        for r in acc:
            for c in r["compiles"]:
                if c["class"] == "refused":
                    k = normalize(c["msg"].split(": error: ", 1)[1]) if c.get("msg") else "?"
                    msgs[k] = msgs.get(k, 0) + 1
        if msgs:
            p("\nlocated compile refusals (message, count):")
            for k, v in sorted(msgs.items(), key=lambda x: -x[1])[:40]:
                p(f"  {v:5d}  {k}")
    cmsgs = {}
    for r in ref:
        k = normalize(r["check_msg"].split(": error: ", 1)[1]) if r.get("check_msg") else "?"
        cmsgs[k] = cmsgs.get(k, 0) + 1
    if cmsgs:
        p("\nlocated check refusals (message, count):")
        for k, v in sorted(cmsgs.items(), key=lambda x: -x[1])[:30]:
            p(f"  {v:5d}  {k}")
    fdir = os.path.join(a.out, "failures")
    os.makedirs(fdir, exist_ok=True)
    p(f"\n==== FAILURES: {len(sw.failures)} distinct, {sum(len(v) for v in sw.failures.values())} in all ====")
    for k, (sig, items) in enumerate(sorted(sw.failures.items(), key=lambda x: -len(x[1]))):
        it = items[0]
        where = sorted({f"{x['arch']}/{x['part']}" for x in items})
        p(f"\n--- FAILURE {k + 1}: {sig}")
        p(f"    {len(items)} occurrence(s) in {len({x['file'] for x in items})} graph(s); at {', '.join(where)}")
        base = os.path.join(fdir, f"failure{k + 1}")
        shutil.copy(it["file"], base + ".attn")
        p(f"    graph: {it['file']} (copied to {base}.attn)")
        others = sorted({x['file'] for x in items})[1:6]
        if others:
            p(f"    also: {' '.join(others)}")
        env = "" if it["part"] == "check" else "ATTN_NO_CACHE=1 "
        p(f"    command: {env}{show(it['cmd'])}")
        res = it["res"]
        p(f"    exit: {res['rc']}{' (timed out)' if res['timed_out'] else ''}, {res['secs']} s")
        tail = [ln for ln in res["stderr"].splitlines() if not ln.startswith("ptxas info")
                and not re.match(r"ptxas\s+\.", ln)][-30:]
        p("    stderr (last 30 lines):")
        for ln in tail:
            p("      " + ln)
        with open(base + ".stderr", "w") as f:
            f.write(res["stderr"])
        if not a.no_minimize:
            sp, steps, tries = sw.minimize(it, sig, a.min_tries)
            if steps:
                mp = base + ".min.attn"
                with open(mp, "w") as f:
                    f.write(render(sp, f"failure{k + 1}_min"))
                p(f"    minimized ({tries} tries; {'; '.join(steps)}): {mp}")
                cmd = list(it["cmd"])
                cmd[2] = mp
                p(f"    minimized command: {env}{show(cmd)}")
            else:
                p(f"    minimization: no single feature could be removed ({tries} tries)")
    p(f"\n==== WARNINGS (ptxas serialized wgmma): {len(sw.warnings)} distinct ====")
    wdir = os.path.join(a.out, "warnings")
    for k, (sig, items) in enumerate(sorted(sw.warnings.items(), key=lambda x: -len(x[1]))):
        it = items[0]
        os.makedirs(wdir, exist_ok=True)
        base = os.path.join(wdir, f"warning{k + 1}")
        shutil.copy(it["file"], base + ".attn")
        where = sorted({f"{x['arch']}/{x['part']}" for x in items})
        p(f"\n--- WARNING {k + 1}: {sig}")
        p(f"    {len(items)} occurrence(s) in {len({x['file'] for x in items})} graph(s); at {', '.join(where)}")
        p(f"    graph: {it['file']} (copied to {base}.attn)")
        p(f"    command: ATTN_NO_CACHE=1 {show(it['cmd'])}")
        p(f"    line: {it['line']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnc", default=os.path.join(ROOT, "build", "attnc"))
    ap.add_argument("--out", default="/tmp/sweep/run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--count", type=int, default=0, help="graphs to run (overrides --minutes)")
    ap.add_argument("--start", type=int, default=0, help="first graph index")
    ap.add_argument("--only", type=int, action="append", help="run only graph index I (repeatable)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--arch", default="sm_80,sm_90a")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--check-only", action="store_true", help="only run attnc check (tune the generator)")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--min-tries", type=int, default=40, help="re-runs per distinct failure when minimizing")
    ap.add_argument("--min-minutes", type=float, default=10.0, help="total time for minimizing")
    ap.add_argument("--print", dest="print_only", action="store_true",
                    help="print the graphs of --only/--count and exit")
    ap.add_argument("--quiet", dest="progress", action="store_false")
    a = ap.parse_args()
    a.jobs = max(1, min(a.jobs, 2))
    a.attnc = os.path.abspath(a.attnc)
    if a.print_only:
        idxs = a.only or range(a.start, a.start + max(a.count, 1))
        for i in idxs:
            print(render(gen_spec(random.Random(f"{a.seed}:{i}")), f"g{a.seed}_{i}"))
        return 0
    os.makedirs(os.path.join(a.out, "graphs"), exist_ok=True)
    sw = Sweep(a)
    started = time.time()
    deadline = started + a.minutes * 60
    if a.only:
        idxs = iter(a.only)
    elif a.count:
        idxs = iter(range(a.start, a.start + a.count))
    else:
        def forever():
            i = a.start
            while True:
                yield i
                i += 1
        idxs = forever()
    use_deadline = not a.only and not a.count
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if use_deadline and time.time() >= deadline:
                    return
                try:
                    i = next(idxs)
                except StopIteration:
                    return
            try:
                sw.do_graph(i)
            except Exception as e:  # a bug in this script: say so, keep going
                print(f"compile_sweep: graph {i}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    try:
        with ThreadPoolExecutor(a.jobs) as ex:
            futs = [ex.submit(worker) for _ in range(a.jobs)]
            for f in futs:
                f.result()
    except KeyboardInterrupt:
        print("interrupted; summarizing what finished", file=sys.stderr)
    sw.min_deadline = time.time() + a.min_minutes * 60
    with open(os.path.join(a.out, "summary.txt"), "w") as fout:
        summarize(sw, a, started, fout)
    return 1 if sw.failures else 0


if __name__ == "__main__":
    sys.exit(main())
