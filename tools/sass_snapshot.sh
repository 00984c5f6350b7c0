#!/usr/bin/env bash
# sass_snapshot.sh ATTNC OUTDIR: the SASS of every benchmarked and tested
# kernel, one text file per (graph file, target), so that a change meant to
# leave the kernels alone can be checked without a GPU:
#
#   tools/sass_snapshot.sh build/attnc /tmp/sass-before   # on the old tree
#   tools/sass_snapshot.sh build/attnc /tmp/sass-after    # on the new one
#   diff -r /tmp/sass-before /tmp/sass-after
#
# Graphs: examples/*.attn, tests/nvrtc/*.attn, and bench/bench.py's
# forward and backward graphs (D 64/128/256, causal or not, dropout),
# written out here the way bench.py writes them. Targets sm_80 and sm_90a.
# Function names are kept (entry points are part of what must not change);
# cuobjdump's header lines (file names) are dropped.
set -u
attnc=${1:?usage: sass_snapshot.sh ATTNC OUTDIR}
out=${2:?usage: sass_snapshot.sh ATTNC OUTDIR}
CUDA=${CUDA:-/usr/local/cuda}
# cuobjdump: the toolkit's, else one on PATH (the nvidia-cuda-cuobjdump
# wheel carries one where the toolkit was installed without it).
CUOBJDUMP=${CUOBJDUMP:-$CUDA/bin/cuobjdump}
[ -x "$CUOBJDUMP" ] || CUOBJDUMP=$(command -v cuobjdump) || {
  echo "sass_snapshot: no cuobjdump (set CUOBJDUMP, or pip install nvidia-cuda-cuobjdump)" >&2
  exit 2
}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fwd() { # fwd D CAUSAL: bench.py's graph_text
  local mask=""
  [ "$2" = 1 ] && mask="    s = mask(s, j <= i);"$'\n'
  printf 'attention fwd {\n    input q : bf16[B, H, S, %s];\n    input k : bf16[B, H, S, %s];\n    input v : bf16[B, H, S, %s];\n    scalar scale : f32 = 1.0 / sqrt(%s.0);\n    s = (q @ k^T) * scale;\n%s    o = softmax(s) @ v;\n    output o : bf16[B, H, S, %s];\n}\n' \
    "$1" "$1" "$1" "$1" "$mask" "$1"
}
bwd() { # bwd D CAUSAL DROPOUT: bench.py's backward_graph_text
  local mask="" seed="" p="softmax(s)"
  [ "$2" = 1 ] && mask="    s = mask(s, j <= i);"$'\n'
  [ "$3" = 1 ] && seed="    scalar seed : u64 = 1234;"$'\n' && p="dropout(softmax(s), 0.1, seed, 0)"
  printf 'attention bwd {\n    input q : bf16[B, H, S, %s];\n    input k : bf16[B, H, S, %s];\n    input v : bf16[B, H, S, %s];\n    scalar scale : f32 = 1.0 / sqrt(%s.0);\n%s    s = (q @ k^T) * scale;\n%s    o = %s @ v;\n    output o : bf16[B, H, S, %s];\n    output lse = logsumexp(s);\n    grad q, k, v;\n}\n' \
    "$1" "$1" "$1" "$1" "$seed" "$mask" "$p" "$1"
}
for D in 64 128 256; do
  for c in 0 1; do
    fwd $D $c >"$tmp/bench_fwd_d${D}_c$c.attn"
    bwd $D $c 0 >"$tmp/bench_bwd_d${D}_c$c.attn"
  done
  bwd $D 0 1 >"$tmp/bench_bwd_d${D}_dropout.attn"
done
n=0 bad=0
for f in examples/*.attn tests/nvrtc/*.attn "$tmp"/*.attn; do
  name=$(basename "${f%.attn}")
  [ -f "tests/golden/emit/$name.err" ] && continue # the matcher refuses it
  for arch in sm_80 sm_90a; do
    if ATTN_NO_CACHE=1 "$attnc" compile "$f" --arch "$arch" -o "$tmp/k.cubin" 2>"$tmp/err"; then
      "$CUOBJDUMP" -sass "$tmp/k.cubin" | grep -v -e '^\s*$' -e 'code for sm_' \
        -e '^Fatbin' -e 'arch = ' -e 'code version' -e 'host = ' -e 'compile_size' \
        -e 'File :' >"$out/$name.$arch.sass"
      n=$((n + 1))
    elif grep -q ': error: ' "$tmp/err"; then
      # A located refusal (D 256 has no sm_80 backward): recorded, so a
      # change in what is refused shows too.
      sed "s|$tmp/||" "$tmp/err" >"$out/$name.$arch.refused"
    else
      echo "sass_snapshot: $f for $arch did not compile:" >&2
      cat "$tmp/err" >&2
      bad=$((bad + 1))
    fi
  done
done
echo "sass_snapshot: $n kernels' SASS in $out ($bad failed)"
[ "$bad" -eq 0 ]
