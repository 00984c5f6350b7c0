#!/usr/bin/env bash
# build.sh ATTNC: what `attnc build` writes is valid wherever the input
# comes from. tests/build/refuse_*.attn must be refused (exit 1) with the
# diagnostics in the .err beside them; a source at a path with spaces, '#',
# '*', '"' and a comment terminator in its name builds, its make rule
# escapes the path, and the generated .c and .h compile as C and C++.
set -u
attnc=${1:?usage: build.sh ATTNC}
. "$(dirname "$0")/lib/tally.sh"
# build ERR ARGS...: attnc build with stderr in ERR (LeakSanitizer's tracer
# crash retried: tests/lib/lsan_retry.sh).
. "$(dirname "$0")/lib/lsan_retry.sh"
build() { local err=$1; shift; lsan_retry "$err" "$attnc" build "$@"; }
for f in tests/build/refuse_*.attn; do
  build "$tmp/err" "$f" --arch sm_80 -o "$tmp/refused"
  rc=$?
  if [ $rc -ne 1 ]; then bad "$f: exit status $rc, expected 1"; continue; fi
  if [ "${UPDATE:-0}" = 1 ]; then cp "$tmp/err" "${f%.attn}.err"; ok; continue; fi
  if cmp -s "${f%.attn}.err" "$tmp/err"; then ok; else diff -u "${f%.attn}.err" "$tmp/err" | head -20; bad "$f"; fi
done
dir="$tmp/a b#c/x"
mkdir -p "$dir"
src="$dir/we*/ird\"x.attn"
mkdir -p "$(dirname "$src")"
cp examples/sdpa.attn "$src"
if ATTN_NO_CACHE=1 build "$tmp/err" "$src" --arch sm_80 -o "$dir/out" --name weird; then
  ok
  want="$(printf '%s' "$dir/out/weird.c" | sed 's/[ #]/\\&/g')"
  grep -qF -- "$want " "$dir/out/weird.d" && ok || bad "the make rule does not escape the path: $(head -1 "$dir/out/weird.d")"
  cc -std=c17 -Wall -Werror -c -Iruntime -o "$tmp/weird.o" "$dir/out/weird.c" && ok || bad "weird.c does not compile"
  c++ -std=c++17 -Wall -Werror -fsyntax-only -x c++ -Iruntime "$dir/out/weird.h" && ok || bad "weird.h is not C++"
else
  cat "$tmp/err"; bad "attnc build of a source at an odd path"
fi
# Progress: a line naming the programs and the threads, and one as each is
# done, on a terminal or with -v (quiet otherwise, as make logs want).
if ATTN_NO_CACHE=1 build "$tmp/perr" examples/sdpa.attn --arch sm_80 -o "$tmp/prog" -v -j 2 &&
   grep -q '^attnc build: compiling 2 programs (cubin for sm_80, PTX for sm_80) on 2 threads$' "$tmp/perr" &&
   grep -qE '^attnc build: \[1/2\] (cubin|PTX) for sm_80 done in [0-9.]+ s$' "$tmp/perr" &&
   grep -qE '^attnc build: \[2/2\] (cubin|PTX) for sm_80 done in [0-9.]+ s$' "$tmp/perr"; then
  ok
else
  cat "$tmp/perr"; bad "attnc build -v shows no progress"
fi
# The targets compiled on one thread or several give the same bytes.
if ATTN_NO_CACHE=1 build "$tmp/jerr" examples/sdpa.attn --arch sm_80,sm_90a -o "$tmp/j1" -j 1 &&
   ATTN_NO_CACHE=1 build "$tmp/jerr" examples/sdpa.attn --arch sm_80,sm_90a -o "$tmp/j3" -j 3 &&
   cmp -s "$tmp/j1/sdpa.c" "$tmp/j3/sdpa.c" && cmp -s "$tmp/j1/sdpa.h" "$tmp/j3/sdpa.h"; then
  ok
else
  cat "$tmp/jerr"; bad "attnc build -j 1 and -j 3 differ"
fi
if ! "$attnc" build examples/sdpa.attn --arch sm_80 -o "$tmp/j0" -j 0 2>"$tmp/jerr" &&
   grep -q -- "-j takes 1 to 64" "$tmp/jerr"; then
  ok
else
  cat "$tmp/jerr"; bad "attnc build -j 0 is not refused"
fi
echo "build: $pass passed, $fail failed"
[ $fail -eq 0 ]
