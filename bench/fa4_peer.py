"""FlashAttention-4 (flash-attn-4 4.0.0b36, CuTe-DSL Hopper kernels) as a benchmark peer for attnc.

Why this does not `import flash_attn.cute`: FA4's Python interface imports the CuTe DSL
(nvidia-cutlass-dsl 4.8.1), whose MLIR/LLVM extension `_cutlass_ir.cu13...so` is 193 MB (47.5 MB even
as .tar.xz, over the 40 MiB the device bundle may take). Running *precompiled* kernels needs none
of it: each FA4 kernel, compiled ahead on a machine without a GPU (FakeTensorMode,
FLASH_ATTENTION_ARCH=sm_90 CUTE_DSL_ARCH=sm_90a FLASH_ATTENTION_NUM_SMS=132, FA4's own persistent
cache), is an object file exporting one TVM-FFI function; linked into a .so (`gcc -shared`), it is
loaded here with tvm_ffi and called with exactly the arguments FA4's `interface.py` passes
(`_flash_attn_fwd`, `_bwd_preprocess`, `_flash_attn_bwd`, `_bwd_postprocess_convert`; recorded from
FA4 itself on the prep machine). The kernels, launch code and argument lists are FA4's; only the
Python glue (allocations, argument list) is re-done here, for the one case it covers:
bf16, MHA (Hq == Hkv), D in {64, 128, 256}, Sq == Skv >= 256, causal or not, no dropout/softcap/window.
Rebuild .fa4 (no GPU needed, 2-4 min): tools/prep_fa4.sh (FA4_OUT=DIR writes elsewhere).

Device (Python 3.12, its own torch 2.11 + CUDA 13; nothing else needed), from the repository root:

    mkdir -p /tmp/fa4 && for f in .fa4/*.tar.xz; do tar xJf "$f" -C /tmp/fa4; done
    python3 bench/fa4_peer.py /tmp/fa4          # self-test vs torch SDPA; prints errors, load times

No environment variables are needed for this module (setup() does it all). setup() also sets, for a
process that has a full FA4 install, FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 and
FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4/fa4cache (FA4's own cache of the same kernels; leave
FA_LOG_LEVEL unset: it is part of FA4's compile key), and prepends /tmp/fa4/site to PYTHONPATH so
subprocesses find tvm_ffi.

Use (tensors [B, H, S, D] bf16 on the GPU, the layout bench.py gives torch SDPA):

    import fa4_peer; fa4_peer.setup("/tmp/fa4")
    o, lse = fa4_peer.fa4_forward(q, k, v, causal, need_lse=True)     # training forward
    o, _ = fa4_peer.fa4_forward(q, k, v, causal)                       # inference forward (no LSE)
    dq, dk, dv = fa4_peer.fa4_backward(q, k, v, o, do, lse, causal)
    o = fa4_peer.fa4_attention(q, k, v, causal)                        # autograd-aware

Layout: FA4 takes BSHD ([B, S, H, D]). It does NOT need contiguous inputs: like FA4's own
`maybe_contiguous`, a tensor is copied only if its last stride is not 1, its pointer is not 16-byte
aligned or another stride is not a multiple of 8 elements. A BHSD tensor's transpose(1, 2) view
passes, so BHSD inputs are given to the kernels as views (no copy) and outputs (o, dq, dk, dv) are
allocated BHSD and written through BSHD views. The anchors (shared/anchors, T2) measured FA4 on
BSHD-contiguous storage; to reproduce that, make the copies once outside the timed region with
`prepare_bshd(q, k, v, do)` and pass `layout="bshd"` (outputs are then BSHD too).
"""
import ctypes
import json
import math
import os
import sys
import time

_ST = {}      # state: dir, manifest, tvm_ffi
_FNS = {}     # (config, part) -> tvm_ffi.Function
LOAD_MS = {}  # (config, part) -> ms spent loading the .so (no compiling happens anywhere here)


def setup(d="/tmp/fa4"):
    """Make the unpacked .fa4 bundle at `d` usable: tvm_ffi on sys.path, the CuTe-DSL runtime
    loaded with RTLD_GLOBAL (the kernels resolve their _cuda*/CuteDSLRT_* symbols from it), the
    kernel manifest read. Idempotent."""
    d = os.path.abspath(d)
    if _ST.get("dir") == d:
        return
    site = os.path.join(d, "site")
    if not os.path.isdir(site):
        raise FileNotFoundError(f"{site} missing: unpack the .fa4 tarballs into {d} first")
    if site not in sys.path:
        sys.path.insert(0, site)
    os.environ["PYTHONPATH"] = site + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", os.path.join(d, "fa4cache"))
    ctypes.CDLL(os.path.join(site, "fa4rt", "libcute_dsl_runtime.so"), mode=ctypes.RTLD_GLOBAL)
    import tvm_ffi
    ctypes.CDLL(tvm_ffi.libinfo.find_libtvm_ffi(), mode=ctypes.RTLD_GLOBAL)
    with open(os.path.join(d, "kernels", "manifest.json")) as f:
        man = json.load(f)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    if man["python"] != py:  # the .so files themselves do not depend on it; FA4's cache key does
        print(f"fa4_peer: note: kernels prepared under Python {man['python']}, running {py}", file=sys.stderr)
    _ST.update(dir=d, manifest=man, tvm_ffi=tvm_ffi)


def _fn(cfg, part):
    key = (cfg, part)
    f = _FNS.get(key)
    if f is None:
        if "dir" not in _ST:
            setup(os.environ.get("FA4_DIR", "/tmp/fa4"))
        ent = _ST["manifest"]["configs"].get(cfg)
        if ent is None:
            raise ValueError(f"no precompiled FA4 kernel for config {cfg!r} "
                             f"(have {sorted(_ST['manifest']['configs'])})")
        t = time.perf_counter()
        m = _ST["tvm_ffi"].load_module(os.path.join(_ST["dir"], "kernels", ent[part]["so"]))
        f = m["func"]
        LOAD_MS[key] = (time.perf_counter() - t) * 1e3
        _FNS[key] = f
    return f


def _cfg(q, k, v, causal):
    import torch
    B, S, H, D = q.shape
    if q.dtype != torch.bfloat16 or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError("fa4_peer: bf16 only")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"fa4_peer: MHA with Sq == Skv only (q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)})")
    if D not in (64, 128, 256):
        raise ValueError(f"fa4_peer: D {D} not precompiled (64, 128, 256)")
    if S < 256:
        # shorter sequences change FA4's compile key (single-block / persistent-scheduler variants)
        raise ValueError(f"fa4_peer: S {S} < 256 needs kernels that were not precompiled")
    if not q.is_cuda:
        raise ValueError("fa4_peer: CUDA tensors only")
    return f"{D}{'c' if causal else ''}"


def _aligned(t, align_bytes=16):
    """FA4's cute_dsl_utils.maybe_contiguous: copy only if the kernels' alignment ABI is not met."""
    if t.data_ptr() % align_bytes != 0:
        return t.clone(memory_format=__import__("torch").contiguous_format)
    if t.is_contiguous():
        return t
    sa = max(1, align_bytes // t.element_size())
    ok = t.stride(-1) == 1 and all(s != 0 and s % sa == 0 for s in t.stride()[:-1])
    return t if ok else t.contiguous()


def _bshd(t, layout):
    """The BSHD tensor the kernel sees: a view of a BHSD tensor, or the BSHD tensor itself."""
    if layout == "bhsd":
        return t.transpose(1, 2)
    if layout == "bshd":
        return t
    raise ValueError(f"layout must be 'bhsd' or 'bshd', not {layout!r}")


def prepare_bshd(*ts):
    """BHSD [B, H, S, D] tensors -> contiguous BSHD [B, S, H, D] copies (do this once, outside the
    timed region, to measure FA4 on BSHD storage as the anchors did). requires_grad is kept."""
    out = tuple(t.detach().transpose(1, 2).contiguous().requires_grad_(t.requires_grad) for t in ts)
    return out if len(out) != 1 else out[0]


def fa4_forward(q, k, v, causal=False, need_lse=False, layout="bhsd", softmax_scale=None, out=None):
    """FA4 forward. q, k, v: [B, H, S, D] (layout="bhsd") or [B, S, H, D] (layout="bshd"), bf16.
    need_lse=True runs FA4's training forward (writes the fp32 LSE [B, H, S] that fa4_backward
    needs); False the inference forward (no LSE; the kernel FA4 uses when no input requires grad).
    Returns (o, lse or None); o has the layout of q."""
    import torch
    qs, ks, vs = (_aligned(_bshd(t.detach(), layout)) for t in (q, k, v))
    cfg = _cfg(qs, ks, vs, causal)
    B, S, H, D = qs.shape
    if out is None:
        out = torch.empty(B, H, S, D, dtype=q.dtype, device=q.device) if layout == "bhsd" else torch.empty_like(qs)
    os_ = _bshd(out, layout)
    lse = torch.empty(B, H, S, dtype=torch.float32, device=q.device) if need_lse else None
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    f = _fn(cfg, "fwd_train" if need_lse else "fwd_infer")
    # _flash_attn_fwd, sm90 call_args: q k v out lse scale, cu_seqlens_q/k, seqused_q/k, page_table,
    # window_left/right, learnable_sink, block-sparse tensors, AuxData(None, None),
    # cu_total_m_blocks, cu_total_splits_m_blocks
    f(qs, ks, vs, os_, lse, scale, None, None, None, None, None, None, None, None, None, (None, None), None, None)
    return out, lse


def fa4_backward(q, k, v, out, dout, lse, causal=False, layout="bhsd", softmax_scale=None, dq=None, dk=None, dv=None):
    """FA4 backward (preprocess, main kernel, dQ postprocess, as _flash_attn_bwd runs them for MHA
    on sm_90). Tensors in `layout`; lse [B, H, S] fp32 from fa4_forward(need_lse=True).
    Returns (dq, dk, dv) in the layout of q."""
    import torch
    qs, ks, vs, os_, dos = (_aligned(_bshd(t.detach(), layout)) for t in (q, k, v, out, dout))
    cfg = _cfg(qs, ks, vs, causal)
    f_pre, f_bwd, f_post = _fn(cfg, "bwd_pre"), _fn(cfg, "bwd"), _fn(cfg, "bwd_post")
    ent = _ST["manifest"]["configs"][cfg]
    B, S, H, D = qs.shape
    dev = q.device
    m_block, hm = ent["m_block"], ent["hdim_multiple_of"]
    s_r = (S + m_block - 1) // m_block * m_block
    d_r = (D + hm - 1) // hm * hm
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    mk = (lambda: torch.empty(B, H, S, D, dtype=q.dtype, device=dev)) if layout == "bhsd" else (lambda: torch.empty_like(qs))
    dq = mk() if dq is None else dq
    dk = mk() if dk is None else dk
    dv = mk() if dv is None else dv
    dq_accum = torch.empty(B, H, s_r * d_r, dtype=torch.float32, device=dev)
    dpsum = torch.empty(B, H, s_r, dtype=torch.float32, device=dev)
    lse_log2 = torch.empty(B, H, s_r, dtype=torch.float32, device=dev)
    lse = lse.detach()
    if not lse.is_contiguous():
        lse = lse.contiguous()
    # _bwd_preprocess: out dout dpsum lse lse_log2 dq_accum cu_seqlens_q seqused_q dlse row_max
    # scale_p softmax_scale(1.0, unused) cu_total_m_blocks o_lo  (also zeroes dq_accum)
    f_pre(os_, dos, dpsum, lse, lse_log2, dq_accum, None, None, None, None, None, 1.0, None, None)
    # _flash_attn_bwd call_args: q k v dout lse_log2 dpsum dq_accum dk dv scale, cu_seqlens_q/k,
    # seqused_q/k, window_left/right, dQ/dK/dV semaphores, AuxData, block-sparse, cu_total_m_blocks_k
    f_bwd(qs, ks, vs, dos, lse_log2, dpsum, dq_accum, _bshd(dk, layout), _bshd(dv, layout), scale,
          None, None, None, None, None, None, None, None, None, (None, None), None, None)
    # _bwd_postprocess_convert: dq_accum dq scale cu_seqlens seqused sink_tensors cu_total_m_blocks
    f_post(dq_accum, _bshd(dq, layout), scale, None, None, None, None)
    return dq, dk, dv


def _autograd_fn():
    import torch

    class FA4Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, layout):
            need = any(t.requires_grad for t in (q, k, v))
            o, lse = fa4_forward(q, k, v, causal, need_lse=need, layout=layout)
            if need:
                ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.layout = causal, layout
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = fa4_backward(q, k, v, o, do, lse, ctx.causal, layout=ctx.layout)
            return dq, dk, dv, None, None

    return FA4Attention


_AF = []


def fa4_attention(q, k, v, causal=False, layout="bhsd"):
    """Autograd-aware FA4 attention (training forward when an input requires grad)."""
    if not _AF:
        _AF.append(_autograd_fn())
    return _AF[0].apply(q, k, v, causal, layout)


# ------------------------------------------------------------------------------------------------
def _selftest(d):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend

    t0 = time.perf_counter()
    setup(d)
    print(f"setup {1e3 * (time.perf_counter() - t0):.0f} ms; torch {torch.__version__} cuda {torch.version.cuda}; "
          f"{torch.cuda.get_device_name(0)}; manifest {_ST['manifest']['versions']}", flush=True)

    def rel(a, b):
        a, b = a.double(), b.double()
        return float((a - b).norm() / b.norm().clamp_min(1e-30))

    torch.manual_seed(0)
    B, H, S = 2, 8, 1024
    fails = 0
    for D in (64, 128, 256):
        for causal in (False, True):
            cfg = f"{D}{'c' if causal else ''}"
            q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            # reference: fp32 math SDPA on the same bf16 inputs
            qr, kr, vr = (t.float().requires_grad_(True) for t in (q, k, v))
            with sdpa_kernel([SDPBackend.MATH]):
                oref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
            oref.backward(do.float())
            # torch cuDNN SDPA in bf16, for scale of the expected error
            qc, kc, vc = (t.clone().requires_grad_(True) for t in (q, k, v))
            try:
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    oc = F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal)
                oc.backward(do)
                cud = f"cudnn o {rel(oc, oref):.1e} dq {rel(qc.grad, qr.grad):.1e}"
            except Exception as ex:
                cud = f"cudnn failed: {type(ex).__name__}"
            # FA4: first calls timed (load of the precompiled .so + first launch; nothing compiles)
            torch.cuda.synchronize()
            t = time.perf_counter()
            o, lse = fa4_forward(q, k, v, causal, need_lse=True)
            torch.cuda.synchronize()
            t_fwd = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            dq, dk, dv = fa4_backward(q, k, v, o, do, lse, causal)
            torch.cuda.synchronize()
            t_bwd = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            oi, _ = fa4_forward(q, k, v, causal)
            torch.cuda.synchronize()
            t_inf = (time.perf_counter() - t) * 1e3
            # BSHD-contiguous path and the autograd wrapper must agree with the BHSD-view path
            qb, kb, vb, dob = prepare_bshd(q, k, v, do)
            ob, lseb = fa4_forward(qb, kb, vb, causal, need_lse=True, layout="bshd")
            dqb, dkb, dvb = fa4_backward(qb, kb, vb, ob, dob, lseb, causal, layout="bshd")
            qa, ka, va = (t.clone().requires_grad_(True) for t in (q, k, v))
            oa = fa4_attention(qa, ka, va, causal)
            oa.backward(do)
            torch.cuda.synchronize()
            e = dict(o=rel(o, oref), dq=rel(dq, qr.grad), dk=rel(dk, kr.grad), dv=rel(dv, vr.grad),
                     o_infer=rel(oi, oref))
            with torch.no_grad():
                lse_ref = torch.logsumexp((qr @ kr.transpose(-1, -2)) / math.sqrt(D) + (
                    torch.full((S, S), float("-inf"), device="cuda").triu(1) if causal else 0.0), -1)
            e["lse"] = rel(lse, lse_ref)
            same = dict(bshd=max(rel(ob.transpose(1, 2), o), rel(dqb.transpose(1, 2), dq), rel(dkb.transpose(1, 2), dk),
                                 rel(dvb.transpose(1, 2), dv)),
                        autograd=max(rel(oa, o), rel(qa.grad, dq), rel(ka.grad, dk), rel(va.grad, dv)))
            ok = max(e.values()) < 1e-2 and max(same.values()) < 1e-2
            fails += not ok
            loads = ", ".join(f"{p} {LOAD_MS[(cfg, p)]:.1f}" for p in ("fwd_train", "bwd_pre", "bwd", "bwd_post", "fwd_infer"))
            print(f"D {D:3d} causal {int(causal)}: {'OK ' if ok else 'BAD'} relerr vs fp32 math "
                  + " ".join(f"{n} {x:.1e}" for n, x in e.items())
                  + f" | bshd/autograd vs bhsd {same['bshd']:.1e}/{same['autograd']:.1e} | {cud}"
                  + f" | first call ms: fwd {t_fwd:.0f} bwd {t_bwd:.0f} infer {t_inf:.0f}"
                  + f" (of which .so load ms: {loads}; precompiled, no compile)", flush=True)

    # a quick speed check against the anchors (T2: FA4 BSHD storage, B*S = 16384, H = 2048 / D, S 4096)
    S, iters = 4096, 20
    for D in (64, 128, 256):
        H, B = 2048 // D, 16384 // S
        for causal in (False, True):
            q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            fl = 4.0 * B * H * S * S * D / (2 if causal else 1)
            res = []
            for name, fn in (("fwd", lambda: fa4_forward(q, k, v, causal, need_lse=True, layout="bshd")),
                             ("bwd", None)):
                if name == "bwd":
                    o, lse = fa4_forward(q, k, v, causal, need_lse=True, layout="bshd")
                    fn = lambda: fa4_backward(q, k, v, o, do, lse, causal, layout="bshd")
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
                torch.cuda._sleep(int(50e6))
                for a, b in ev:
                    a.record(); fn(); b.record()
                torch.cuda.synchronize()
                ms = sorted(a.elapsed_time(b) for a, b in ev)[iters // 2]
                res.append(f"{name} {fl * (2.5 if name == 'bwd' else 1) / ms / 1e9:.0f} TFLOP/s ({ms:.3f} ms)")
            print(f"speed D {D} S {S} B {B} H {H} causal {int(causal)} (bshd): " + ", ".join(res), flush=True)
    print("SELFTEST", "PASS" if not fails else f"FAIL ({fails} configs)")
    return fails


if __name__ == "__main__":
    sys.exit(1 if _selftest(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FA4_DIR", "/tmp/fa4")) else 0)
