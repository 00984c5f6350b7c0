"""flashinfer_peer.py: FlashInfer's paged decode and paged prefill, run in the same process as
attnc's benchmarks, on the tensors bench/decode.py and bench/paged_prefill.py build.

FlashInfer cannot compile its kernels on the GPU machine (no time, no network), so they come
prebuilt: tools/prep_flashinfer.sh (run on a CPU machine) builds the bf16 / head dim 128 modules
for sm_90a and packs them with FlashInfer's Python part and tvm-ffi into .fi/site_fi.tar.xz
(~12 MB, ignored by git: name `.fi` in the device run's carry). On the device:

    SITE=/tmp/site_fi; mkdir -p $SITE && tar xJf .fi/site_fi.tar.xz -C $SITE
    PYTHONPATH=$SITE FLASHINFER_DISABLE_JIT=1 python3 bench/decode.py ...

Importing this module sets FLASHINFER_DISABLE_JIT=1 when it is unset, so that a module missing
from the bundle fails at once (MissingJITCacheError) instead of compiling for minutes; set it to
an empty string to allow compiling. Modules in the bundle: bf16 q/k/v/o, int32 indices, D 128,
no RoPE / sliding window / soft cap: CUDA-core decode, the fa2 prefill (also the tensor-core
decode) with k and v caches of equal strides, and the fa3 (sm90) prefill; and for an e4m3 cache
under a bf16 q the CUDA-core decode and, where it built, the fa2 module of the tensor-core decode
(.fi/modules.txt lists what the bundle holds). paged_decode takes the caches' dtype as FlashInfer's
kv_data_type, so e4m3 caches need no other call.

Layouts: caches [pages, page, Hk, D] (FlashInfer's NHD; hnd=True: [pages, Hk, page, D]),
page_table i32 [B, max_pages] (entries past a sequence's ceil(kv_len / page) pages are ignored, so
-1 padding is fine), kv_len i32 [B]. FlashInfer's page list (indptr, indices, last_page_len) is
derived from the table once, and the wrapper is planned once, when the callable is made; the
callable only launches the kernel(s), writing into the output it returns. The scale is 1/sqrt(D),
as attnc's benchmark graphs use.
"""
import math
import os

import torch

os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")

_WORKSPACE = {}  # device -> float workspace shared by all wrappers (runs are serialized on a stream)
_WORKSPACE_BYTES = 512 << 20


def available():
    """True when FlashInfer imports (with JIT disabled unless the caller allowed it)."""
    try:
        import flashinfer  # noqa: F401
    except Exception:
        return False
    return True


def _workspace(device):
    ws = _WORKSPACE.get(device)
    if ws is None:
        ws = _WORKSPACE[device] = torch.zeros(_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return ws


def page_list(page_table, kv_len, page):
    """(indptr [B+1], indices, last_page_len [B]), int32 on the table's device: sequence b's first
    ceil(kv_len[b] / page) table entries, concatenated."""
    table = page_table.to("cpu", torch.int32)
    lens = kv_len.to("cpu", torch.int64)
    npages = (lens + page - 1) // page
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(npages, 0)
    used = torch.arange(table.shape[1])[None, :] < npages[:, None]
    indices = table[used]  # row-major: sequence by sequence, pages in table order
    last = torch.where(npages > 0, lens - (npages - 1) * page, torch.zeros_like(lens))
    dev = page_table.device
    return (indptr.to(dev, torch.int32), indices.to(dev, torch.int32), last.to(dev, torch.int32))


def paged_decode(q, k_cache, v_cache, page_table, kv_len, page, tensor_cores=False, hnd=False, out=None):
    """q [B, H, 1, D] -> zero-argument callable that runs FlashInfer's batch decode and returns
    o [B, H, 1, D] (`out` or a new tensor). tensor_cores=False is the CUDA-core decode kernel
    (the anchors' "FlashInfer paged"); True the fa2 prefill kernel FlashInfer uses for GQA."""
    import flashinfer
    B, H, sq, D = q.shape
    assert sq == 1, "decode: one query row a sequence"
    Hk = k_cache.shape[1 if hnd else 2]
    indptr, indices, last = page_list(page_table, kv_len, page)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(_workspace(q.device), "HND" if hnd else "NHD",
                                                      use_tensor_cores=tensor_cores, backend="fa2")
    w.plan(indptr, indices, last, H, Hk, D, page, q_data_type=q.dtype, kv_data_type=k_cache.dtype,
           sm_scale=1.0 / math.sqrt(D))
    o = torch.empty_like(q) if out is None else out
    qv, ov, kv = q.view(B, H, D), o.view(B, H, D), (k_cache, v_cache)
    keep = (indptr, indices, last)  # the plan refers to them

    def run():
        w.run(qv, kv, out=ov)
        return o
    run.wrapper, run.keep = w, keep
    return run


def paged_prefill(q, cu_q, k_cache, v_cache, page_table, kv_len, page, causal=True, backend="fa3",
                  hnd=False, out=None):
    """Packed q [T, H, D] with offsets cu_q i32 [B+1] against the paged caches -> zero-argument
    callable that runs FlashInfer's batch prefill and returns o [T, H, D]. causal is bottom-right
    aligned (query i of a sequence sees keys j <= i + kv_len - q_len), as attnc's graphs mask.
    backend "fa3" is the sm90 kernel the anchors measured, "fa2" the portable one."""
    import flashinfer
    T, H, D = q.shape
    Hk = k_cache.shape[1 if hnd else 2]
    indptr, indices, last = page_list(page_table, kv_len, page)
    qo_indptr = cu_q.to(q.device, torch.int32)
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(_workspace(q.device), "HND" if hnd else "NHD",
                                                       backend=backend)
    w.plan(qo_indptr, indptr, indices, last, H, Hk, D, page, causal=causal, sm_scale=1.0 / math.sqrt(D),
           q_data_type=q.dtype, kv_data_type=k_cache.dtype)
    o = torch.empty_like(q) if out is None else out
    kv = (k_cache, v_cache)
    keep = (qo_indptr, indptr, indices, last)

    def run():
        w.run(q, kv, out=o)
        return o
    run.wrapper, run.keep = w, keep
    return run


def _reference(q, k_cache, v_cache, page_table, kv_len, page, b, causal):
    """fp32 attention of sequence b's packed rows q [Sq, H, D] over its paged keys (bottom-right causal)."""
    L, H, D = int(kv_len[b]), q.shape[1], q.shape[2]
    pages = page_table[b, :(L + page - 1) // page].long()
    k, v = (c[pages].reshape(-1, c.shape[2], D)[:L].float() for c in (k_cache, v_cache))
    k, v = (t.repeat_interleave(H // t.shape[1], 1) for t in (k, v))
    s = torch.einsum("qhd,khd->hqk", q.float(), k) / math.sqrt(D)
    if causal:
        i = torch.arange(q.shape[0], device=q.device)[:, None]
        s = s.masked_fill(torch.arange(L, device=q.device)[None, :] > i + L - q.shape[0], float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v)


def _selftest(dev="cuda"):
    """python3 bench/flashinfer_peer.py: each path once on a small ragged GQA batch (page 16,
    shuffled pages, -1 padding) against an fp32 reference; relative errors should be ~2e-3."""
    torch.manual_seed(0)
    H, Hk, D, page, lens = 32, 8, 128, 16, [1000, 37, 515, 1]
    B, n = len(lens), [(x + page - 1) // page for x in lens]
    perm = torch.randperm(sum(n), device=dev).to(torch.int32)
    table = torch.full((B, max(n)), -1, dtype=torch.int32, device=dev)
    for b in range(B):
        table[b, :n[b]] = perm[sum(n[:b]):sum(n[:b + 1])]
    kv_len = torch.tensor(lens, dtype=torch.int32, device=dev)
    kc, vc = (torch.randn(sum(n), page, Hk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    err = lambda o, r: ((o.float() - r).norm() / r.norm()).item()  # noqa: E731
    q = torch.randn(B, H, 1, D, device=dev, dtype=torch.bfloat16)
    ref = torch.cat([_reference(q[b, :, 0][None], kc, vc, table, kv_len, page, b, False) for b in range(B)])
    for tc in (False, True):
        o = paged_decode(q, kc, vc, table, kv_len, page, tensor_cores=tc)()
        print(f"decode {'tensor-core' if tc else 'CUDA-core'}: rel. err. {err(o[:, :, 0], ref):.1e}")
    qlens = [min(x, 200) for x in lens]  # appends onto the cache's tails
    cu = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
    qp = torch.randn(sum(qlens), H, D, device=dev, dtype=torch.bfloat16)
    ref = torch.cat([_reference(qp[cu[b]:cu[b + 1]], kc, vc, table, kv_len, page, b, True) for b in range(B)])
    for be in ("fa3", "fa2"):
        o = paged_prefill(qp, cu, kc, vc, table, kv_len, page, backend=be)()
        print(f"prefill {be}, causal: rel. err. {err(o, ref):.1e}")


if __name__ == "__main__":
    _selftest()
