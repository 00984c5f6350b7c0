"""Context-parallel attention over N GPUs with attnc and torch.distributed (NCCL).

    torchrun --nproc-per-node N examples/python/ring_attention.py [--seq 131072] [--check]
                                                              [--engine python|c]

Each rank holds a shard of a long causal sequence (queries, keys and values of S / N positions),
in the zigzag layout that gives every rank the same causal work (chunks r and 2N-1-r of 2N;
--layout contiguous for plain slices); attnc.ring_attention passes the key/value shards around
the ring while each rank computes its queries' attention against them with an attnc graph whose
mask reads global positions through the scalars q0 and k0, then the backward. --check also runs the whole sequence
on every rank's GPU (small --seq only) and compares. NVLink multicast stays off
(NCCL_NVLS_ENABLE=0). Written in session 19 without a multi-GPU machine: not yet run on GPUs;
the ring's logic is tested on CPUs (python/tests/test_ring.py).

--engine c runs libattn's own ring instead (runtime/ring.c, docs/ring.md: the shards move over
NCCL inside libattn, on a communicator attnc.NcclComm makes through the process group);
--engine python (the default) is attnc.ring_attention, the same protocol in Python over
torch.distributed. The C ring ran with its ranks simulated on one GPU and with one NCCL rank
(tests/gpu/test_ring.c); not yet on several GPUs.
"""
import argparse
import os
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch
import torch.distributed as dist

import attnc

GRAPH = """
attention shard {
  input  q : bf16[B, H, Sq, 128];
  input  k : bf16[B, Hk, Skv, 128];
  input  v : bf16[B, Hk, Skv, 128];
  scalar q0 : i32 = 0;
  scalar k0 : i32 = 0;
  s = mask((q @ k^T) * (1.0 / sqrt(128.0)), j + k0 <= i + q0);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 128];
  output lse = logsumexp(s);
  grad q, k, v;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=131072)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--layout", default="zigzag", choices=["zigzag", "contiguous"])
    ap.add_argument("--engine", default="python", choices=["python", "c"])
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    graph = attnc.compile(GRAPH).shard
    fwd, bwd = attnc.attnc_shard_functions(graph)
    if args.engine == "c":
        comm = attnc.NcclComm()
        ring = lambda q_, k_, v_: attnc.c_ring_attention(graph, comm, q_, k_, v_, layout=args.layout)
    else:
        ring = lambda q_, k_, v_: attnc.ring_attention(q_, k_, v_, fwd, bwd, layout=args.layout)
    S, n = args.seq, args.seq // world
    g = torch.Generator(device="cuda").manual_seed(0)  # the same whole sequence on every rank
    mk = lambda h: torch.randn(1, h, S, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(args.heads), mk(args.kv_heads), mk(args.kv_heads), mk(args.heads)
    if args.layout == "zigzag":
        c = n // 2
        idx = torch.cat([torch.arange(rank * c, (rank + 1) * c),
                         torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)]).cuda()
    else:
        idx = torch.arange(rank * n, (rank + 1) * n).cuda()
    mine = lambda x: x[..., idx, :].contiguous().requires_grad_(x is not do)
    qs, ks, vs, dos = mine(q), mine(k), mine(v), mine(do)
    for it in range(3):  # the first compiles and warms up
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        o, lse = ring(qs, ks, vs)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        o.backward(dos)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        qs.grad = ks.grad = vs.grad = None
    flops = 4 * args.heads * S * S * 128 * 0.5  # causal, the whole sequence
    if rank == 0:
        print(f"{world} GPUs, S {S}: forward {(t1 - t0) * 1e3:.1f} ms ({flops / (t1 - t0) / 1e12:.0f} "
              f"TFLOP/s in all), backward {(t2 - t1) * 1e3:.1f} ms "
              f"({2.5 * flops / (t2 - t1) / 1e12:.0f} TFLOP/s in all)")
    if args.check:
        o, lse = ring(qs, ks, vs)
        o.backward(dos)
        ow, lw = fwd(q, k, v, 0, 0)
        dqw, dkw, dvw = bwd(q, k, v, ow, lw, do, 0, 0)
        rel = lambda a, b: ((a.double() - b.double()).norm() / b.double().norm()).item()
        errs = [rel(o, ow[..., idx, :]), rel(qs.grad, dqw[..., idx, :]),
                rel(ks.grad, dkw[..., idx, :]), rel(vs.grad, dvw[..., idx, :])]
        print(f"rank {rank}: relative error of o, dq, dk, dv against one GPU: "
              + ", ".join(f"{e:.1e}" for e in errs))
        assert max(errs) < 2e-2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
