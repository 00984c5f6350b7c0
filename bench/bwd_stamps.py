#!/usr/bin/env python3
"""Where bwd_sm90's consumers spend a work item's time: the stamps diagnostic.

    python3 bench/bwd_stamps.py --lib build/libattn.so [--dims 128] [--seqs 1024,4096]

The backward's main kernel compiled under backward_template 92 writes, per work item (one key
tile of one head), global-timer stamps over the start of the item's first dK row
(BWD90_ST_* in templates/bwd_sm90.cuh). This script times the backward with and without the
stamps (what they cost), runs the stamped one once more, reads the words back from dK and
summarizes per item:

    compute   BEGIN..END     the item's K/V landed to the loop's top after its last tile
    first     BEGIN..FIRST   its first query tile
    per tile  (END - FIRST) / (tiles - 1)
    wait      END..SWITCH    the next item's first stage full (the producer's copies)
    meet      SWITCH..MET    both warpgroups met (named barrier) before the next K/V copies
    issue     MET..ISSUED    the next item's K/V copies issued
    stores    ISSUED..STORED this item's dK/dV stores issued
    landed    STORED..NEXT   the next item's K/V landed

and per CTA: its items' compute over the kernel's span, and its idle after its last item.
A question this answers: whether a per-item cost that a linear fit of S 1k against S 4k shows
(bench/NOTES-sm90.md, sessions 43-44) is in the switch, in the first tile, or spread.
"""
import argparse, os, statistics, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Attn, backward_graph_text, backward_sets, time_batches  # noqa: E402

WORDS = ["WHO", "TILES", "BEGIN", "FIRST", "END", "SWITCH", "MET", "ISSUED", "STORED", "NEXT"]


def rel(x, ref):
    """x - ref on the 32-bit nanosecond timer (wraps every 4.3 s), signed."""
    d = (x - ref) & 0xFFFFFFFF
    return d - (1 << 32) if d >= 1 << 31 else d


def items_of(dk, S, bn=128):
    """The stamped words of every item: a list of dicts (times in us from the earliest BEGIN)."""
    B, H = dk.shape[0], dk.shape[1]
    w = dk.view(torch.int32).view(B, H, S, -1)[:, :, ::bn, :len(WORDS)].reshape(-1, len(WORDS))
    w = (w.to(torch.int64) & 0xFFFFFFFF).cpu().tolist()
    ref = min(r[2] for r in w)
    out = []
    for r in w:
        d = dict(zip(WORDS, r))
        for k in WORDS[2:]:
            d[k] = rel(d[k], ref) / 1000.0
        d["cta"] = d["WHO"] & 0xFFFF
        out.append(d)
    return out


def summary(items):
    def stat(vals):
        return (f"mean {statistics.mean(vals):7.2f}  median {statistics.median(vals):7.2f}  "
                f"max {max(vals):7.2f}") if vals else "-"
    last = {}
    for it in items:
        c = it["cta"]
        if c not in last or it["END"] > last[c]["END"]:
            last[c] = it
    switched = [it for it in items if last[it["cta"]] is not it]
    lines = [f"items {len(items)}, CTAs {len(last)}, tiles an item "
             f"{statistics.mean(it['TILES'] for it in items):.1f}"]
    rows = [
        ("compute (us)", [it["END"] - it["BEGIN"] for it in items]),
        ("first tile", [it["FIRST"] - it["BEGIN"] for it in items if it["TILES"] > 1]),
        ("per later tile", [(it["END"] - it["FIRST"]) / (it["TILES"] - 1)
                            for it in items if it["TILES"] > 1]),
        ("switch: wait", [it["SWITCH"] - it["END"] for it in switched]),
        ("switch: meet", [it["MET"] - it["SWITCH"] for it in switched]),
        ("switch: issue", [it["ISSUED"] - it["MET"] for it in switched]),
        ("switch: stores", [it["STORED"] - it["ISSUED"] for it in switched]),
        ("switch: landed", [it["NEXT"] - it["STORED"] for it in switched]),
        ("switch: total", [it["NEXT"] - it["END"] for it in switched]),
    ]
    for name, vals in rows:
        lines.append(f"  {name:15s} {stat(vals)}")
    start = min(it["BEGIN"] for it in items)
    end = max(it["STORED"] for it in items)
    span = end - start
    busy, idle_end, first_begin = [], [], []
    for c in last:
        mine = [it for it in items if it["cta"] == c]
        busy.append(sum(it["END"] - it["BEGIN"] for it in mine) / span)
        idle_end.append(end - last[c]["STORED"])
        first_begin.append(min(it["BEGIN"] for it in mine) - start)
    lines.append(f"  span {span:.1f} us (first BEGIN to last STORED); per CTA: compute share "
                 f"{statistics.mean(busy):.3f} (min {min(busy):.3f}), idle after its last item "
                 f"mean {statistics.mean(idle_end):.1f} us (max {max(idle_end):.1f}), first BEGIN "
                 f"after the earliest: mean {statistics.mean(first_begin):.1f} us "
                 f"(max {max(first_begin):.1f})")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--dims", default="128")
    ap.add_argument("--seqs", default="1024,4096")
    ap.add_argument("--causal", default="0,1", help="0,1: both")
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    plain, stamped = Attn(args.lib), Attn(args.lib)
    plain.set_option("backward_template", 90)
    stamped.set_option("backward_template", 92)
    for D in [int(d) for d in args.dims.split(",")]:
        H = 2048 // D
        for causal in [c == "1" for c in args.causal.split(",")]:
            mods = [a.compile("bwd", backward_graph_text(D, causal)) for a in (plain, stamped)]
            for S in [int(s) for s in args.seqs.split(",")]:
                B = max(1, 16384 // S)
                sets = [backward_sets(a, m, B, H, S, D, n=1)[0] for a, m in zip((plain, stamped), mods)]
                ms = [time_batches([lambda a=a, c=s[-1]: a.launch_backward(c)])
                      for a, s in zip((plain, stamped), sets)]
                a, s = stamped, sets[1]
                s[5].zero_()
                a.launch_backward(s[-1])
                torch.cuda.synchronize()
                print(f"\n## D {D}, S {S}, B {B}, H {H}, causal {causal}: backward {ms[0]:.3f} ms, "
                      f"stamped {ms[1]:.3f} ms ({ms[1] / ms[0]:.3f}x)")
                print(summary(items_of(s[5], S)))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
