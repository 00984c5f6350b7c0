#!/usr/bin/env bash
# run_examples.sh ATTNC: the main job on every bundled example. Each graph
# is checked, JIT-compiled and run on the GPU against the CPU reference
# (with its backward, for graphs that declare grad) at
# two shapes (one not a multiple of the tile, with Sq != Skv). Without a
# GPU each is compiled and run on the CPU reference alone, and the script
# says so. Exit status: 0 when nothing failed.
set -u
attnc=${1:?usage: run_examples.sh ATTNC}
ok=0 failed=0 notrun=0 refused=0
for f in examples/*.attn; do
  echo "=== $f"
  if ! "$attnc" check "$f"; then failed=$((failed + 1)); continue; fi
  # Shapes name only the graph's own dimension symbols (attnc ir's "dims").
  dims=" $("$attnc" ir "$f" | sed -n 's/^  dims //p' | head -1) "
  has() { case "$dims" in *" $1 "*) return 0 ;; esac; return 1; }
  base=""
  has B && base="B=2,"
  has H && base="${base}H=4,"
  has Hk && base="${base}Hk=2,"
  if has Sq && has Skv; then odd="Sq=77,Skv=201"; even="Sq=256,Skv=256"
  else odd="S=201"; even="S=256"; fi
  for shape in "$base$even" "$base$odd"; do
    "$attnc" run "$f" --shape "$shape" --seed 7 --backward
    case $? in
      0) ok=$((ok + 1)) ;;
      1) refused=$((refused + 1)); break ;;   # the matcher refuses it: printed why
      3) notrun=$((notrun + 1))
         "$attnc" run "$f" --cpu --shape "$shape" --seed 7 --backward || failed=$((failed + 1)) ;;
      *) failed=$((failed + 1)) ;;
    esac
  done
done
echo "examples: $ok passed on the GPU, $failed failed, $notrun not run on a GPU (no GPU here), $refused not supported by a kernel template yet"
[ $failed -eq 0 ]
