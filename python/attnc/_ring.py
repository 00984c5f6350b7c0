"""ring_attention: context parallelism over a ring of torch.distributed ranks (issue 20's
framework side; the C layer over NCCL is not written yet).

Each rank holds one contiguous shard of the sequence: queries, keys and values [..., S_r, D] at
global positions rank * S_r .. (rank + 1) * S_r - 1 (every rank the same S_r). The key/value shards
travel around the ring, each rank computing its queries' attention against every shard (its own
first), with the shard's global offsets, and merging the partial results (merge_partials). The
backward sends the key/value shards around again with their dK/dV accumulating as they go, each
rank adding its queries' part, computed from the merged O and lse (the shard's part of the whole
gradient: P = exp(s - lse) over its keys is the global softmax restricted to them), and a shard's
gradients arrive home after the last step. Sends and receives are posted before each step's
compute and waited for after it (torch.distributed's isend/irecv; NCCL on GPUs, gloo on CPUs).

The attention of one shard is the caller's: `forward(q, k, v, q0, k0) -> (o, lse)` and
`backward(q, k, v, o, lse, do, q0, k0) -> (dq, dk, dv)`. attnc_shard_functions(graph) makes them
from an attnc graph whose mask reads global positions through two i32 scalars (docs/language.md
"Positions"), e.g. `s = mask((q @ k^T) * scale, j + k0 <= i + q0)` with `output lse =
logsumexp(s)` and `grad q, k, v`.

Layouts: "contiguous" (rank r holds positions r*S_r ..), or "zigzag" for causal masks (rank r of
N holds chunks r and 2N-1-r of 2N equal chunks, in that order, so every rank has the same causal
work, as Llama 3's context parallelism shards): each shard is then two pieces, and each step runs
the four piece pairs with their own offsets (a pair the mask leaves empty costs a launch, its
tiles all skipped).
"""
import torch
import torch.distributed as dist

from ._merge import merge_partials


def _exchange(tensors, group, rank, world):
    """Posts the sends of `tensors` to the next rank and the receives of as many from the previous
    one; returns (the requests, the buffers that will hold what arrives)."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    bufs = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, dist.get_global_rank(group, nxt) if group else nxt, group)
           for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, dist.get_global_rank(group, prv) if group else prv, group)
            for b in bufs]
    return dist.batch_isend_irecv(ops), bufs


def _pieces(layout, rank, world, n):
    """The contiguous pieces of rank's shard of n positions: (first row in the shard, rows,
    first global position)."""
    if layout == "contiguous":
        return [(0, n, rank * n)]
    if layout == "zigzag":
        if n % 2:
            raise ValueError(f"ring_attention: a zigzag shard has an even length, not {n}")
        c = n // 2
        return [(0, c, rank * c), (c, c, (2 * world - 1 - rank) * c)]
    raise ValueError(f"ring_attention: layout '{layout}' (want 'contiguous' or 'zigzag')")


def _rows(x, piece):
    lo, m, _ = piece
    return x[..., lo:lo + m, :]


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, fwd, bwd, group, layout):
        world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        qp = _pieces(layout, rank, world, q.shape[-2])
        kv = (k.contiguous(), v.contiguous())
        parts = [[] for _ in qp]  # per query piece: (o, lse) of every key piece met
        for step in range(world):
            src = (rank - step) % world  # whose key/value shard this step holds
            reqs, nxt = _exchange(kv, group, rank, world) if step + 1 < world else ([], None)
            for a, pa in enumerate(qp):
                for pb in _pieces(layout, src, world, k.shape[-2]):
                    parts[a].append(fwd(_rows(q, pa), _rows(kv[0], pb), _rows(kv[1], pb), pa[2], pb[2]))
            for r in reqs:
                r.wait()
            if nxt is not None:
                kv = tuple(nxt)
        merged = [merge_partials([p[0] for p in ps], [p[1] for p in ps]) for ps in parts]
        o = torch.cat([m[0] for m in merged], -2).to(q.dtype)
        lse = torch.cat([m[1] for m in merged], -1)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.bwd, ctx.group, ctx.layout = bwd, group, layout
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        group, layout = ctx.group, ctx.layout
        world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        qp = _pieces(layout, rank, world, q.shape[-2])
        acc = torch.promote_types(q.dtype, torch.float32)  # f32, or f64 for f64 inputs
        dq = torch.zeros_like(q, dtype=acc)
        # The travelling shard and its gradients, added to at every rank it visits.
        kv = (k.contiguous(), v.contiguous())
        dkv = (torch.zeros_like(k, dtype=acc), torch.zeros_like(v, dtype=acc))
        for step in range(world):
            src = (rank - step) % world
            for pa in qp:
                la, ma, _ = pa
                for pb in _pieces(layout, src, world, k.shape[-2]):
                    lb, mb, _ = pb
                    dq_s, dk_s, dv_s = ctx.bwd(_rows(q, pa), _rows(kv[0], pb), _rows(kv[1], pb),
                                               _rows(o, pa), lse[..., la:la + ma], _rows(do, pa),
                                               pa[2], pb[2])
                    dq[..., la:la + ma, :] += dq_s.to(acc)
                    dkv[0][..., lb:lb + mb, :] += dk_s.to(acc)
                    dkv[1][..., lb:lb + mb, :] += dv_s.to(acc)
            # Everything moves one rank on; after `world` moves each shard is home.
            reqs, nxt = _exchange(kv + dkv, group, rank, world)
            for r in reqs:
                r.wait()
            kv, dkv = tuple(nxt[:2]), tuple(nxt[2:])
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None, None


def ring_attention(q, k, v, forward, backward, group=None, layout="contiguous"):
    """This rank's queries' attention over every rank's keys and values (see the module's
    docstring): returns (o, lse) like the shard graph; differentiable in q, k and v (the
    gradient of lse is not propagated: graphs take dO only). layout: "contiguous" or "zigzag"."""
    if not dist.is_initialized():
        raise RuntimeError("ring_attention needs torch.distributed initialized (NCCL on GPUs)")
    _pieces(layout, 0, 1, q.shape[-2])  # a bad layout or length is refused before any exchange
    return _Ring.apply(q, k, v, forward, backward, group, layout)


def attnc_shard_functions(graph, q0="q0", k0="k0"):
    """forward and backward for ring_attention from an attnc graph (attnc.compile(...).<name>)
    taking q, k, v and the i32 scalars named q0 and k0, with outputs o and lse and grad q, k, v."""
    def fwd(q, k, v, qo, ko):
        with torch.no_grad():
            o, lse = graph(q, k, v, **{q0: int(qo), k0: int(ko)})
        return o, lse

    def bwd(q, k, v, o, lse, do, qo, ko):
        tensors, scalars = graph._arguments((q, k, v), {q0: int(qo), k0: int(ko)})
        return graph.run_backward(tensors, (o.to(q.dtype), lse), do.contiguous(), scalars, False)
    return fwd, bwd
