#!/usr/bin/env bash
# run_examples.sh ATTNC: the main job on every bundled example. Each graph
# is checked, JIT-compiled and run on the GPU against the CPU reference at
# two shapes (one not a multiple of the tile, with Sq != Skv). Without a
# GPU each is compiled and run on the CPU reference alone, and the script
# says so. Exit status: 0 when nothing failed.
set -u
attnc=${1:?usage: run_examples.sh ATTNC}
ok=0 failed=0 notrun=0 refused=0
for f in examples/*.attn; do
  echo "=== $f"
  if ! "$attnc" check "$f"; then failed=$((failed + 1)); continue; fi
  for shape in "B=2,H=4,S=256" "B=1,H=4,Sq=77,Skv=201"; do
    "$attnc" run "$f" --shape "$shape" --seed 7
    case $? in
      0) ok=$((ok + 1)) ;;
      1) refused=$((refused + 1)); break ;;   # the matcher refuses it: printed why
      3) notrun=$((notrun + 1))
         "$attnc" run "$f" --cpu --shape "$shape" --seed 7 || failed=$((failed + 1)) ;;
      *) failed=$((failed + 1)) ;;
    esac
  done
done
echo "examples: $ok passed on the GPU, $failed failed, $notrun not run on a GPU (no GPU here), $refused not supported by a kernel template yet"
[ $failed -eq 0 ]
