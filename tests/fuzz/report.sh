#!/usr/bin/env bash
# report.sh FUZZ_BUILD: after a failed `make fuzz`, prints each input
# libFuzzer saved (crash-*, timeout-*, leak-*, oom-* under FUZZ_BUILD) as
# text, then the program's own stack frames from one rerun of it. It goes
# last so that a log's tail (all CI may keep of it) shows the input and
# where it failed, not libFuzzer's frames. Copy the input into
# tests/fuzz/corpus as a regression unit once it is fixed.
B=${1:-build/fuzz}
found=0
for f in "$B"/crash-* "$B"/timeout-* "$B"/leak-* "$B"/oom-*; do
  [ -f "$f" ] || continue
  found=1
  echo "== fuzz: the failing input $f ($(wc -c <"$f") bytes; cat -v, first 4000):"
  head -c 4000 "$f" | cat -v
  echo
  echo "== fuzz: its rerun's frames in attnc's code:"
  timeout 120 "$B/fuzz_front" -runs=1 -timeout=10 "$f" 2>&1 | grep -E '^ +#[0-9]+ ' | grep -vE 'fuzzer::|libc|_start|__sanitizer|LLVMFuzzer|compiler-rt' |
    head -16
done
[ $found = 1 ] || echo "== fuzz: failed, and libFuzzer saved no input under $B"
