"""varlen.py: packed variable-length batches (examples/packed.attn's form) against dense ones.

Runs on the GPU machine: python3 bench/varlen.py [--lib build/libattn.so] [--out DIR]

Two tables, bf16, one process:
- Equal lengths: B sequences of S tokens (B*S = 16384, H = 2048 / D), packed [B*S, H, D] with
  offsets against the dense [B, H, S, D] graph on the same values, and cuDNN (torch SDPA) on the
  dense tensors. Issue 18's bar: packed within 5% of dense at the same total tokens.
- Ragged batches: FlashInfer's prefill anchor cases (../shared/anchors, T4: the same request
  lengths, D 128, causal aligned at the end, Hq:Hkv 32:8 and 32:32), attnc packed; FlashInfer ran
  on a paged cache in another process (quoted). FLOPs count each request's own keys.
- Backward (--tables backward): equal lengths as above, grad q, k, v: the packed backward (the
  default template: bwd_sm90 on Hopper since session 19, one CTA per key tile of a sequence;
  bwd_sm80 before) against the dense graph's on the same values, with bwd_sm90 (the default on
  Hopper, persistent) and with bwd_sm80, and cuDNN's backward (SDPA through autograd). FLOPs 2.5x
  the forward's.

Every packed output is compared with the dense graph's (equal lengths) or with torch SDPA run
per request in float32 (ragged) before it is timed.
"""
import argparse, json, os, sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, checked_variant, driver_version, time_batches  # noqa: E402

# FlashInfer's ragged prefill (fa3 backend, page 16), H200, ../shared/anchors T4: TFLOP/s.
FI_ANCHOR = {("8 req, 16k tok", 8): 468, ("32 req x ~1k", 8): 390, ("append 512 onto 8k, 16 req", 8): 514,
             ("8 req, 16k tok", 32): 462, ("32 req x ~1k", 32): 437, ("append 512 onto 8k, 16 req", 32): 551}
RAGGED = [("8 req, 16k tok", [(n, n) for n in (512, 1024, 2048, 4096, 777, 3000, 1500, 3427)]),
          ("32 req x ~1k", [(256 + 97 * i, 256 + 97 * i) for i in range(32)]),
          ("append 512 onto 8k, 16 req", [(512, 8192)] * 16)]


def packed_text(D, causal, form="seqlen"):
    """causal: aligned at the end (FlashAttention's varlen) with the lengths' names (seqlen), or
    read from the offsets (offsets); or top-left (j <= i)."""
    mask = {"seqlen": "    s = mask(s, j <= i + seqlen_k - seqlen_q);\n",
            "offsets": "    s = mask(s, j <= i + (ck[b + 1] - ck[b]) - (cq[b + 1] - cq[b]));\n",
            "top_left": "    s = mask(s, j <= i);\n"}[form] if causal else ""
    return ("attention pk {\n"
            f"    input q : bf16[Tq, H, {D}];\n    input k : bf16[Tk, Hk, {D}];\n"
            f"    input v : bf16[Tk, Hk, {D}];\n    input cq : i32[B1];\n    input ck : i32[B1];\n"
            f"    s = (packed(q, cq) @ packed(k, ck)^T) * (1.0 / sqrt({D}.0));\n{mask}"
            "    o = softmax(s) @ packed(v, ck);\n"
            f"    output o : bf16[Tq, H, {D}];\n}}\n")


def dense_text(D, causal):
    mask = "    s = mask(s, j <= i);\n" if causal else ""
    return ("attention dn {\n"
            f"    input q : bf16[B, H, S, {D}];\n    input k : bf16[B, H, S, {D}];\n"
            f"    input v : bf16[B, H, S, {D}];\n"
            f"    s = (q @ k^T) * (1.0 / sqrt({D}.0));\n{mask}    o = softmax(s) @ v;\n"
            f"    output o : bf16[B, H, S, {D}];\n}}\n")


def with_grad(text):
    """A forward text (packed_text or dense_text) that also saves lse and declares grad."""
    head, _, tail = text.rpartition("}")
    return head + "    output lse = logsumexp(s);\n    grad q, k, v;\n" + "}" + tail


def offsets(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")


def equal_lengths(attn, rows):
    for D in (64, 128):
        mods = {c: (attn.compile(f"pk{D}{c}.attn", packed_text(D, c)),
                    attn.compile(f"dn{D}{c}.attn", dense_text(D, c))) for c in (False, True)}
        for S in (1024, 4096):
            B, H = 16384 // S, 2048 // D
            for causal in (False, True):
                mp, md = mods[causal]
                q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                # The same values packed: token-major [B*S, H, D].
                qp, kp, vp = (x.transpose(1, 2).reshape(B * S, H, D).contiguous() for x in (q, k, v))
                cu = offsets([S] * B)
                od = torch.empty_like(q)
                op = torch.full_like(qp, float("nan"))
                cd = attn.call(md, "dn", dict(q=q, k=k, v=v, o=od))
                cp = attn.call(mp, "pk", dict(q=qp, k=kp, v=vp, cq=cu, ck=cu, o=op))
                attn.launch(cd)
                attn.launch(cp)
                torch.cuda.synchronize()
                want = od.transpose(1, 2).reshape(B * S, H, D).float()
                err = ((op.float() - want).norm() / want.norm()).item()
                # Bitwise where both run one kernel's tiles; dense unmasked D 128 takes key tiles
                # of 176 (packed sequences count as masked: 128), another order of the sums.
                assert err < (1e-2 if D == 128 and not causal else 1e-6), (D, S, causal, err)
                tp = time_batches([lambda: attn.launch(cp)])
                td = time_batches([lambda: attn.launch(cd)])
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    tc = time_batches([lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)])
                fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
                row = dict(table="equal", D=D, S=S, B=B, H=H, causal=causal, packed_ms=tp, dense_ms=td,
                           cudnn_ms=tc, packed_tflops=fl / tp / 1e9, dense_tflops=fl / td / 1e9,
                           cudnn_tflops=fl / tc / 1e9, packed_over_dense=td / tp, max_rel_err=err)
                rows.append(row)
                print(json.dumps(row), flush=True)
                del q, k, v, qp, kp, vp, od, op


def backward(attn, rows):
    for D in (64, 128):
        for causal in (False, True):
            pk = attn.compile(f"bpk{D}{causal}.attn", with_grad(packed_text(D, causal, "top_left")))
            dn90 = attn.compile(f"bdn{D}{causal}.attn", with_grad(dense_text(D, causal)))
            attn.set_option("backward_template", 80)
            dn80 = attn.compile(f"bdn80{D}{causal}.attn", with_grad(dense_text(D, causal)))
            attn.set_option("backward_template", 0)
            for S in (1024, 4096):
                B, H = 16384 // S, 2048 // D
                q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                tok = lambda x: x.transpose(1, 2).reshape(B * S, H, D).contiguous()
                qp, kp, vp, dop = (tok(x) for x in (q, k, v, do))
                cu = offsets([S] * B)
                out = {}
                calls = {}
                for name, mod, dense in (("packed", pk, False), ("bwd_sm90", dn90, True), ("bwd_sm80", dn80, True)):
                    if dense:
                        t = dict(q=q, k=k, v=v, o=torch.empty_like(q), lse=torch.empty(B, H, S, device="cuda"))
                        g = dict(do=do, dq=torch.empty_like(q), dk=torch.empty_like(q), dv=torch.empty_like(q))
                        c = attn.call(mod, "dn", t)
                    else:
                        t = dict(q=qp, k=kp, v=vp, cq=cu, ck=cu, o=torch.empty_like(qp),
                                 lse=torch.empty(H, B * S, device="cuda"))
                        g = dict(do=dop, dq=torch.full_like(qp, float("nan")), dk=torch.full_like(qp, float("nan")),
                                 dv=torch.full_like(qp, float("nan")))
                        c = attn.call(mod, "pk", t)
                    attn.launch(c)
                    attn.bind(c, g)
                    attn.launch_backward(c)
                    calls[name] = c
                    out[name] = [g[n] if not dense else tok(g[n]) for n in ("dq", "dk", "dv")]
                torch.cuda.synchronize()
                errs = [((a.float() - b.float()).norm() / b.float().norm()).item()
                        for a, b in zip(out["packed"], out["bwd_sm80"])]
                assert max(errs) < 1e-2, (D, S, causal, errs)  # dQ's atomics add in another order
                ms = {n: time_batches([lambda c=c: attn.launch_backward(c)]) for n, c in calls.items()}
                tq, tk, tv = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    o_ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                    ms["cudnn"] = time_batches([lambda: torch.autograd.grad(o_ref, (tq, tk, tv), do,
                                                                            retain_graph=True)])
                fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
                row = dict(table="backward", D=D, S=S, B=B, H=H, causal=causal,
                           **{f"{n}_ms": t for n, t in ms.items()},
                           **{f"{n}_tflops": fl / t / 1e9 for n, t in ms.items()},
                           packed_over_sm80=ms["bwd_sm80"] / ms["packed"],
                           packed_over_sm90=ms["bwd_sm90"] / ms["packed"], max_rel_err_vs_sm80=max(errs))
                rows.append(row)
                print(json.dumps(row), flush=True)
                for c in calls.values():
                    c.close()
                del q, k, v, do, qp, kp, vp, dop, out, calls


def mask_forms(attn, rows):
    """What the form of a packed causal mask costs at equal lengths (the same keys): aligned at the
    end through seqlen_q/seqlen_k, or read from the offsets, against top-left (j <= i)."""
    D, S = 128, 1024
    B, H = 16384 // S, 2048 // D
    q, k, v = (torch.randn(B * S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = offsets([S] * B)
    calls, outs = {}, {}
    for form in ("top_left", "seqlen", "offsets"):
        outs[form] = torch.empty_like(q)
        m = attn.compile(f"m_{form}.attn", packed_text(D, True, form))
        calls[form] = attn.call(m, "pk", dict(q=q, k=k, v=v, cq=cu, ck=cu, o=outs[form]))
        attn.launch(calls[form])
    torch.cuda.synchronize()
    assert torch.equal(outs["top_left"], outs["seqlen"]) and torch.equal(outs["top_left"], outs["offsets"])
    base = time_batches([lambda: attn.launch(calls["top_left"])])
    for form in ("seqlen", "offsets"):
        t = time_batches([lambda: attn.launch(calls[form])])
        row = dict(table="masks", case=f"packed causal D {D} S {S}: end-aligned ({form}) / j <= i",
                   ms=t, other_ms=base, ratio=base / t)
        rows.append(row)
        print(json.dumps(row), flush=True)


def padding(attn, rows):
    """examples/padding.attn (lengths read per batch entry) on padded tensors: the same run with
    two libattn builds measures a change of how such masks are tested."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "padding.attn")) as f:
        pad = attn.compile("padding.attn", f.read())
    B, H, S = 8, 16, 2048
    qd, kd, vd = (torch.randn(B, H, S, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    g = torch.Generator().manual_seed(1)
    lq = torch.randint(S // 2, S + 1, (B,), generator=g, dtype=torch.int32).cuda()
    lk = torch.randint(S // 2, S + 1, (B,), generator=g, dtype=torch.int32).cuda()
    od, lse = torch.empty_like(qd), torch.empty(B, H, S, device="cuda")
    c = attn.call(pad, "padding", dict(q=qd, k=kd, v=vd, seqlen_q=lq, seqlen_kv=lk, o=od, lse=lse))
    t = time_batches([lambda: attn.launch(c)])
    row = dict(table="padding", case=f"examples/padding.attn B {B} H {H} S {S}", ms=t)
    rows.append(row)
    print(json.dumps(row), flush=True)


def ragged(attn, rows):
    D = 128
    mod = attn.compile("pk128c.attn", packed_text(D, True))
    for hkv in (8, 32):
        hq = 32
        for name, reqs in RAGGED:
            ql, kl = [a for a, _ in reqs], [b for _, b in reqs]
            q = torch.randn(sum(ql), hq, D, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(sum(kl), hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            cq, ck = offsets(ql), offsets(kl)
            o = torch.full_like(q, float("nan"))
            c = attn.call(mod, "pk", dict(q=q, k=k, v=v, cq=cq, ck=ck, o=o))
            attn.launch(c)
            torch.cuda.synchronize()
            errs = []
            for b in (0, len(reqs) // 2, len(reqs) - 1):  # float32 SDPA per request, end-aligned causal
                a, n = ql[b], kl[b]
                qb = q[cq[b]:cq[b + 1]].transpose(0, 1)[None].float()
                kb = k[ck[b]:ck[b + 1]].transpose(0, 1)[None].float().repeat_interleave(hq // hkv, 1)
                vb = v[ck[b]:ck[b + 1]].transpose(0, 1)[None].float().repeat_interleave(hq // hkv, 1)
                keep = torch.arange(n, device="cuda")[None, :] <= torch.arange(a, device="cuda")[:, None] + (n - a)
                ref = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=keep)[0].transpose(0, 1)
                got = o[cq[b]:cq[b + 1]].float()
                errs.append(((got - ref).norm() / ref.norm()).item())
            assert max(errs) < 0.02, (name, hkv, errs)
            t = time_batches([lambda: attn.launch(c)])
            fl = sum(4.0 * hq * D * (a * (b - a) + a * (a + 1) / 2) for a, b in reqs)
            row = dict(table="ragged", case=name, Hq=hq, Hkv=hkv, D=D, q_tokens=sum(ql), ms=t,
                       tflops=fl / t / 1e9, flashinfer_anchor_tflops=FI_ANCHOR[(name, hkv)],
                       max_rel_err=max(errs))
            rows.append(row)
            print(json.dumps(row), flush=True)
            del q, k, v, o


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tables", default="equal,masks,padding,ragged,backward")
    ap.add_argument("--variant", default="auto",
                    help="fwd_sm90's variant for every graph (bench.py SM90_VARIANTS), dense and "
                         "packed alike")
    args = ap.parse_args()
    checked_variant(ap, args.variant)
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    attn = Attn(os.path.abspath(args.lib))
    attn.set_sm90_variant(args.variant)
    rows = []
    tables = args.tables.split(",")
    if "equal" in tables:
        equal_lengths(attn, rows)
    if "masks" in tables:
        mask_forms(attn, rows)
    if "padding" in tables:
        padding(attn, rows)
    if "ragged" in tables:
        ragged(attn, rows)
    if "backward" in tables:
        backward(attn, rows)
    info = dict(gpu=torch.cuda.get_device_name(), driver=driver_version(), torch=torch.__version__,
                cudnn=torch.backends.cudnn.version())
    os.makedirs(args.out, exist_ok=True)
    info["sm90_variant"] = args.variant
    tag = "" if args.variant == "auto" else f"-{args.variant}"
    with open(os.path.join(args.out, f"varlen-{'-'.join(tables)}{tag}.json"), "w") as f:
        json.dump(dict(info=info, rows=rows), f, indent=1)
    print("| D | S | causal | packed | dense | cuDNN dense | packed / dense |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["table"] == "equal":
            print(f"| {r['D']} | {r['S']} | {'yes' if r['causal'] else 'no'} | {r['packed_tflops']:.0f} | "
                  f"{r['dense_tflops']:.0f} | {r['cudnn_tflops']:.0f} | {r['packed_over_dense']:.3f} |")
    for r in rows:
        if r["table"] in ("masks", "padding"):
            print(f"mask forms: {r['case']}: {r['ms']:.3f} ms" +
                  (f" vs {r['other_ms']:.3f} ms ({r['ratio']:.3f})" if "other_ms" in r else ""))
    print("\n| D | S | causal | packed bwd | dense bwd_sm80 | dense bwd_sm90 | cuDNN | packed / sm80 | packed / sm90 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["table"] == "backward":
            print(f"| {r['D']} | {r['S']} | {'yes' if r['causal'] else 'no'} | {r['packed_tflops']:.0f} | "
                  f"{r['bwd_sm80_tflops']:.0f} | {r['bwd_sm90_tflops']:.0f} | {r['cudnn_tflops']:.0f} | "
                  f"{r['packed_over_sm80']:.3f} | {r['packed_over_sm90']:.3f} |")
    print("\n| case | Hq:Hkv | q tokens | attnc packed ms | TFLOP/s | FlashInfer anchor | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["table"] == "ragged":
            print(f"| {r['case']} | {r['Hq']}:{r['Hkv']} | {r['q_tokens']} | {r['ms']:.3f} | "
                  f"{r['tflops']:.0f} | {r['flashinfer_anchor_tflops']} | "
                  f"{r['tflops'] / r['flashinfer_anchor_tflops']:.2f} |")


if __name__ == "__main__":
    main()
