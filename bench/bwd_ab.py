#!/usr/bin/env python3
"""Main-kernel A/B from bwd_breakdown.py logs, one per build or backward template.

    python3 bench/bwd_ab.py BASE.log OTHER.log [MORE.log ...]

Each log is bwd_breakdown.py's output (`## D .., S .., B .., H .., causal ..` headers, then per
kernel `TIME us  SHARE%  NAME` lines for attnc and cuDNN). Prints, per configuration, attnc's main
kernel (attn_*_bwd_main) in each log, each later log's change against the first in percent, and
cuDNN's main kernel from the first log, as a Markdown table. The logs come from separate processes
(one per template): read a change of a few percent against the run-to-run spread bwd_breakdown
shows for the same build (session 46: within ~1-2% at S >= 4k).
"""
import re
import sys

HEADER = re.compile(r"^## D (\d+), S (\d+), B (\d+), H (\d+), causal (\w+)")
LINE = re.compile(r"^\s*([0-9.]+) us\s+[0-9.]+%\s+(\S+)")


def main_kernels(path):
    """{(D, S, causal): (attnc main us, cuDNN main us)} from one log."""
    out, key, side = {}, None, None
    for line in open(path, errors="replace"):
        m = HEADER.match(line)
        if m:
            key = (int(m.group(1)), int(m.group(2)), m.group(5) == "True")
            out[key] = [None, None]
            continue
        if line.startswith("attnc:"):
            side = 0
        elif line.startswith("cuDNN:"):
            side = 1
        m = LINE.match(line)
        if key is None or side is None or not m:
            continue
        us, name = float(m.group(1)), m.group(2)
        if side == 0 and re.match(r"attn_\w*bwd_main", name):
            out[key][0] = us
        elif side == 1 and out[key][1] is None and "bprop" in name:
            out[key][1] = us
    return out


def main(paths):
    logs = [main_kernels(p) for p in paths]
    names = [p.rsplit("/", 1)[-1].removesuffix(".log") for p in paths]
    cols = [f"{n} (us)" for n in names] + [f"{n} vs {names[0]}" for n in names[1:]]
    print("| D | S | causal | " + " | ".join(cols) + " | cuDNN main (us) |")
    print("|---|---|---|" + "---|" * (len(cols) + 1))
    for key in sorted(logs[0]):
        base = logs[0][key][0]
        times = [log.get(key, [None, None])[0] for log in logs]
        cells = [f"{t:.1f}" if t is not None else "-" for t in times]
        for t in times[1:]:
            cells.append(f"{100 * (t / base - 1):+.1f}%" if t is not None and base else "-")
        cudnn = logs[0][key][1]
        d, s, causal = key
        last = f"{cudnn:.1f}" if cudnn is not None else "-"
        print(f"| {d} | {s} | {'yes' if causal else 'no'} | " + " | ".join(cells) + f" | {last} |")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:])
