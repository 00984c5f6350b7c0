"""compile_time.py: cold NVRTC compile time of each example's programs, on any machine (no GPU).

    python3 bench/compile_time.py [--attnc build/attnc] [--base OTHER/attnc] [--part prefill]
                                  [--arch sm_90a] [--runs 3] [--json OUT] [examples/x.attn ...]

Times `attnc compile FILE --part P` end to end, a fresh process a run: the front end, match, plans
and emit take about 1-2 ms of it, the rest is NVRTC (front end, NVVM, ptxas) on the part's program,
which is what libattn's JIT pays on a cache miss (prefill: the forward pass's main kernels, the ones
a graph's first forward launch waits for; decode and backward compile on their first launches).
`attnc compile` never reads the kernel cache, but NVRTC 13 keeps one of its own across processes
where a GPU driver is present (bench/NOTES-sm90.md, session 39), so each run sets ATTN_NO_CACHE=1,
which passes NVRTC --no-cache. With --base, each run
of the other binary alternates with ours, so a busy machine slows both alike; report the ratio.
The issue 19 bar: < 0.5 s a forward kernel on the development machine (2 cores).
"""
import argparse, glob, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def kernels_in(attnc, path, part, arch):
    """How many __global__ functions the part's unit holds (attnc compile --source)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "unit.cu")
        subprocess.run([attnc, "compile", path, "--arch", arch, "--part", part, "-o",
                        os.path.join(d, "x.cubin"), "--source", src], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return open(src).read().count("__global__")


def one_run(attnc, path, part, arch):
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        r = subprocess.run([attnc, "compile", path, "--arch", arch, "--part", part, "-o",
                            os.path.join(d, "x.cubin")], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env=dict(os.environ, ATTN_NO_CACHE="1"))
        dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{attnc} compile {path} failed: {r.stderr.decode()[-400:]}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnc", default=os.path.join(ROOT, "build", "attnc"))
    ap.add_argument("--base", help="another attnc to time beside it, run for run")
    ap.add_argument("--part", default="prefill", choices=["prefill", "decode", "backward", "forward"])
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    files = a.files or sorted(glob.glob(os.path.join(ROOT, "examples", "*.attn")))
    rows = []
    hdr = f"| example | kernels | {a.part} s (min, median)"
    hdr += " | base s | ratio |" if a.base else " |"
    print(hdr)
    print("|---" * (5 if a.base else 3) + "|")
    for f in files:
        name = os.path.splitext(os.path.basename(f))[0]
        try:
            k = kernels_in(a.attnc, f, a.part, a.arch)
        except subprocess.CalledProcessError:
            continue  # no such part (a graph without a backward, say)
        ours, base = [], []
        for _ in range(a.runs):
            ours.append(one_run(a.attnc, f, a.part, a.arch))
            if a.base:
                base.append(one_run(a.base, f, a.part, a.arch))
        row = {"example": name, "kernels": k, "min": min(ours), "median": statistics.median(ours)}
        line = f"| {name} | {k} | {row['min']:.3f}, {row['median']:.3f}"
        if a.base:
            row["base_min"], row["base_median"] = min(base), statistics.median(base)
            line += (f" | {row['base_min']:.3f}, {row['base_median']:.3f}"
                     f" | {row['median'] / row['base_median']:.2f} |")
        else:
            line += " |"
        print(line, flush=True)
        rows.append(row)
    if a.json:
        json.dump({"arch": a.arch, "part": a.part, "runs": a.runs, "rows": rows},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
