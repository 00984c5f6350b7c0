#!/usr/bin/env python3
"""ncu_source_top.py CSV [N] [--at ADDR[,ADDR...] [--before B] [--after A]]

Reads the SASS source page that tools/ncu_stalls.sh SOURCE=1 writes (ncu-source.csv, plain or
.xz) on the development machine, which has no ncu: per profiled kernel, the share of warp stall
samples by reason and the N instructions holding the most samples, each with its three leading
reasons. --at prints the instructions around the given addresses (their last hex digits, e.g.
0700) with their samples and execution counts, to see which barrier or load a wait belongs to.
"""
import argparse, collections, csv, lzma


def kernels_of(path):
    opener = lzma.open if path.endswith(".xz") else open
    kernels, cur, hdr = [], None, None
    with opener(path, "rt") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                cur, hdr = [], None
                kernels.append((row[1] if len(row) > 1 else "?", cur))
                continue
            if hdr is None:
                hdr = row
                continue
            cur.append(dict(zip(hdr, row)))
    return kernels


def num(r, k):
    try:
        return float((r.get(k) or "0").replace(",", ""))
    except ValueError:
        return 0.0


SAMPLES = "Warp Stall Sampling (All Samples)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("n", nargs="?", type=int, default=30)
    ap.add_argument("--at", help="addresses (last hex digits) to print the neighbourhood of")
    ap.add_argument("--kernel", type=int, help="only the kernel of this index")
    ap.add_argument("--before", type=int, default=12)
    ap.add_argument("--after", type=int, default=4)
    args = ap.parse_args()
    for ki, (name, rows) in enumerate(kernels_of(args.csv)):
        if args.kernel is not None and ki != args.kernel:
            continue
        tot = sum(num(r, SAMPLES) for r in rows) or 1.0
        reasons = [c for c in (rows[0].keys() if rows else []) if c.startswith("stall_")
                   and "Not Issued" not in c]
        print(f"=== kernel {ki} ({name}): {len(rows)} SASS lines, {tot:.0f} samples")
        if args.at:
            index = {r["Address"][-4:]: i for i, r in enumerate(rows)}
            for a in args.at.split(","):
                i = index.get(a[-4:])
                if i is None:
                    print(f"--- {a}: not in this kernel")
                    continue
                print(f"--- around {a}")
                for r in rows[max(0, i - args.before): i + args.after]:
                    print(f"{r['Address'][-5:]} {num(r, SAMPLES):8.0f} "
                          f"{num(r, 'Instructions Executed'):12.0f} {r['Source'][:100]}")
            continue
        agg = collections.Counter()
        for r in rows:
            for c in reasons:
                agg[c] += num(r, c)
        print("  by reason:", ", ".join(f"{c[6:]} {v / tot * 100:.1f}%" for c, v in agg.most_common(8)))
        for r in sorted(rows, key=lambda r: -num(r, SAMPLES))[:args.n]:
            top = sorted(((num(r, c), c[6:]) for c in reasons), reverse=True)[:3]
            print(f"  {num(r, SAMPLES) / tot * 100:5.1f}% {r['Address'][-5:]} {r['Source'][:70]:70s} "
                  + " ".join(f"{n}:{v:.0f}" for v, n in top if v))


if __name__ == "__main__":
    main()
