"""attnc.ring_attention (python/attnc/_ring.py) on CPUs: 2 and 3 ranks over gloo, each holding a
contiguous or a zigzag shard (chunks r and 2N-1-r) of a float64 sequence, with a reference shard attention (global positions from
the shard offsets, causal or a window) in place of an attnc graph; o, lse and the gradients of q, k
and v equal one process's whole attention under autograd. The attnc graph path
(attnc_shard_functions) needs GPUs and is not run here."""
import math
import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")
import attnc  # noqa: E402

B, H, S, D = 2, 3, 24, 8
SCALE = 1 / math.sqrt(D)


def keep_of(i, j, kind):
    if kind == "causal":
        return j <= i
    return (j <= i) & (i - j < 7)  # a window: some rows reach only some shards


def ref_fwd(kind):
    def fwd(q, k, v, q0, k0):
        i = torch.arange(q.shape[-2])[:, None] + q0
        j = torch.arange(k.shape[-2])[None, :] + k0
        s = (q @ k.transpose(-1, -2)) * SCALE
        s = s.masked_fill(~keep_of(i, j, kind), float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(lse), 0, lse).unsqueeze(-1))
        return p @ v, lse
    return fwd


def ref_bwd(kind):
    def bwd(q, k, v, o, lse, do, q0, k0):
        i = torch.arange(q.shape[-2])[:, None] + q0
        j = torch.arange(k.shape[-2])[None, :] + k0
        s = (q @ k.transpose(-1, -2)) * SCALE
        keep = keep_of(i, j, kind)
        p = torch.where(keep, torch.exp(s - torch.where(torch.isinf(lse), 0, lse).unsqueeze(-1)), 0.0)
        dp = do @ v.transpose(-1, -2)
        delta = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        return (ds @ k) * SCALE, (ds.transpose(-1, -2) @ q) * SCALE, p.transpose(-1, -2) @ do
    return bwd


def whole(kind, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, generator=g, dtype=torch.float64) for _ in range(4))
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    s = (qg @ kg.transpose(-1, -2)) * SCALE
    s = s.masked_fill(~keep_of(i, j, kind), float("-inf"))
    o = torch.softmax(s, -1) @ vg
    lse = torch.logsumexp(s, -1)
    (o * do).sum().backward()
    return (q, k, v, do), (o.detach(), lse.detach(), qg.grad, kg.grad, vg.grad)


def rows_of(layout, rank, world):
    """The global positions rank holds, in its shard's order."""
    n = S // world
    if layout == "contiguous":
        return torch.arange(rank * n, (rank + 1) * n)
    c = n // 2
    return torch.cat([torch.arange(rank * c, (rank + 1) * c),
                      torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)])


def rank_main(rank, world, init, kind, layout, out):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        (q, k, v, do), want = whole(kind, 0)
        idx = rows_of(layout, rank, world)
        qs, ks, vs = (x[..., idx, :].clone().requires_grad_(True) for x in (q, k, v))
        o, lse = attnc.ring_attention(qs, ks, vs, ref_fwd(kind), ref_bwd(kind), layout=layout)
        (o * do[..., idx, :]).sum().backward()
        got = (o.detach(), lse.detach(), qs.grad, ks.grad, vs.grad)
        errs = [(g - w[..., idx, :] if g.dim() == 4 else g - w[..., idx]).abs().max().item()
                for g, w in zip(got, want)]
        torch.save(errs, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("kind,layout", [("causal", "contiguous"), ("window", "contiguous"),
                                         ("causal", "zigzag"), ("window", "zigzag")])
def test_ring_equals_the_whole(world, kind, layout):
    with tempfile.TemporaryDirectory() as out:
        init = "file://" + os.path.join(out, "rendezvous")
        mp.spawn(rank_main, args=(world, init, kind, layout, out), nprocs=world, join=True)
        for r in range(world):
            errs = torch.load(os.path.join(out, f"{r}.pt"))
            # o, lse, dq, dk, dv. Float64 agrees to 1e-15, but now and then (2 runs in about 30,
            # session 22) the whole-sequence reference's lse in a gloo rank process came out
            # 7e-10..1.2e-9 off its value in every other process (the ring's lse matched the
            # latter); not seen without the process group. A wrong merge or offset is off by
            # 1e-3 or more on these inputs, so 1e-7 still catches it.
            assert max(errs) < 1e-7, (r, errs)
