"""warm_load.py: what loading a module from a warm kernel cache costs a fresh process.

Runs on the GPU machine: python3 bench/warm_load.py [--lib build/libattn.so] [--runs 7]

bench.py's "warm load" column loads a second time in the process that just compiled, where NVRTC
is already loaded; a program starting with a warm cache is not in that state. Here each load is a
process of its own: it imports torch and the attnc package and makes the CUDA context (untimed, as
an application would have them), then times attnc.Context() + compile, which on a hit is the
front end, the plans, the cache entry and cuLibraryLoadData with the kernel lookups. A first
process compiles into an empty cache directory (cold); then --runs processes load (warm). Each
warm process also says whether attnc's load brought libnvrtc in (it must not: a hit needs no
NVRTC; PyTorch may have mapped it already, which the JSON records apart).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

GRAPHS = {
    "sdpa D128": open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                   "sdpa.attn")).read(),
    "backward D128 (two programs)": open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "examples", "backward.attn")).read(),
}

CHILD = r"""
import os, sys, time, json
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
os.environ["ATTN_LIBRARY"] = sys.argv[2]
import torch
torch.zeros(1, device="cuda")
import attnc
text = open(sys.argv[4]).read()
# (torch may have loaded NVRTC itself: what counts is whether attnc's load did)
nvrtc_before = any("libnvrtc" in l for l in open("/proc/self/maps"))
t0 = time.perf_counter()
ctx = attnc.Context()
ctx.set_cache_dir(sys.argv[3])
mod = ctx.compile(text, "g")
ms = (time.perf_counter() - t0) * 1e3
nvrtc = any("libnvrtc" in l for l in open("/proc/self/maps"))
print(json.dumps(dict(ms=ms, nvrtc_loaded=nvrtc and not nvrtc_before, nvrtc_before=nvrtc_before)))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libattn.so")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    rows = []
    for name, text in GRAPHS.items():
        cache = tempfile.mkdtemp(prefix="attnc-warm-")
        src = os.path.join(cache, "g.attn")
        with open(src, "w") as f:
            f.write(text)
        run = lambda: json.loads(subprocess.run(
            [sys.executable, "-c", CHILD, root, os.path.abspath(args.lib), cache, src],
            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        cold = run()
        warm = [run() for _ in range(args.runs)]
        ms = [w["ms"] for w in warm]
        row = dict(graph=name, cold_ms=cold["ms"], warm_median_ms=statistics.median(ms),
                   warm_min_ms=min(ms), warm_max_ms=max(ms),
                   warm_nvrtc_loaded=any(w["nvrtc_loaded"] for w in warm),
                   nvrtc_loaded_before_attnc=any(w["nvrtc_before"] for w in warm))
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "warm_load.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("| graph | cold compile ms | warm load ms, fresh process (median, min-max) | NVRTC loaded by the hit |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['graph']} | {r['cold_ms']:.0f} | {r['warm_median_ms']:.2f} "
              f"({r['warm_min_ms']:.2f}-{r['warm_max_ms']:.2f}) | "
              f"{'yes' if r['warm_nvrtc_loaded'] else 'no'} |")


if __name__ == "__main__":
    main()
