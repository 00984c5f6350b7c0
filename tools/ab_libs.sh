#!/usr/bin/env bash
# ab_libs.sh OLD_LIB NEW_LIB [bench.py args...]: on the GPU machine, the forward grid of
# bench/bench.py under two builds of libattn, alternating A B A B (each a fresh process, so each
# compiles its own kernels; cuDNN and FA4 are timed in every process too: the yardstick the two
# builds are compared by). ROUNDS=1 for one round of the two. For a template change that keeps
# the results bit for bit (the rel err columns must then match), where variant_ab.py's
# one-process comparison would need a variant. Tables go to ${OUT:-/tmp}/ab-{old,new}-N/; the
# summary compares each configuration's attnc / cuDNN between the builds, per round and in
# geometric mean.
set -u
old=${1:?usage: ab_libs.sh OLD_LIB NEW_LIB [bench.py args]}
new=${2:?usage: ab_libs.sh OLD_LIB NEW_LIB [bench.py args]}
shift 2
out=${OUT:-/tmp}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for which in old new; do
    lib=$old; [ $which = new ] && lib=$new
    mkdir -p "$out/ab-$which-$round"
    python3 bench/bench.py --lib "$lib" --out "$out/ab-$which-$round" "$@" \
      >"$out/ab-$which-$round/log.txt" 2>&1 || echo "ab_libs: $which round $round failed"
  done
done
python3 - "$out" <<'PY'
import json, math, sys, os
out = sys.argv[1]
def rows(which, rnd):
    p = os.path.join(out, f"ab-{which}-{rnd}", "bench-grid.json")
    if not os.path.exists(p):
        return {}
    d = json.load(open(p))
    d = d.get("rows", d) if isinstance(d, dict) else d
    return {(r["D"], r["S"], r["causal"]): r for r in d if isinstance(r, dict) and "D" in r}
for rnd in range(1, int(os.environ.get("ROUNDS", "2")) + 1):
    o, n = rows("old", rnd), rows("new", rnd)
    keys = sorted(set(o) & set(n))
    ratios = []
    for k in keys:
        ro = o[k].get("attnc_tflops", 0) / max(o[k].get("cudnn_tflops", 1e-9), 1e-9)
        rn = n[k].get("attnc_tflops", 0) / max(n[k].get("cudnn_tflops", 1e-9), 1e-9)
        if ro > 0 and rn > 0:
            ratios.append(rn / ro)
            eo, en = o[k].get("rel_err_vs_cudnn", -1), n[k].get("rel_err_vs_cudnn", -1)
            print(f"round {rnd} D {k[0]} S {k[1]} causal {k[2]}: attnc/cuDNN old {ro:.3f} new {rn:.3f} "
                  f"({rn / ro - 1:+.1%}); rel err old {eo:.3e} new {en:.3e}")
    if ratios:
        g = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"round {rnd}: new / old in attnc/cuDNN, geometric mean {g:.3f} over {len(ratios)}")
PY
