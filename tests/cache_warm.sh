#!/usr/bin/env bash
# cache_warm.sh ATTNC: `attnc cache warm` fills a kernel cache with every program of each file
# (the forward's, the decode kernels', the backward's: attn_module_prepare), on several threads;
# a second warm finds them all and adds nothing; bad files, options and ATTN_NO_CACHE are
# refused with their messages and exit statuses, the good files still warmed. No GPU needed.
set -u
attnc=${1:?usage: cache_warm.sh ATTNC}
. "$(dirname "$0")/lib/tally.sh"
. "$(dirname "$0")/lib/lsan_retry.sh"
warm() { local err=$1; shift; ATTN_CACHE_DIR="$tmp/cache" lsan_retry "$err" "$attnc" cache warm "$@"; }
entries() { find "$tmp/cache" -name '*.bin' | sort; }

# sdpa: its forward and its decode kernels; backward_gqa: forward, decode and backward.
warm "$tmp/err" --arch sm_90a -j 2 examples/sdpa.attn examples/backward_gqa.attn >"$tmp/out"
rc=$?
[ $rc -eq 0 ] && ok || { bad "warm: exit status $rc"; cat "$tmp/err"; }
grep -q '^warm: 2 of 2 files on 2 threads$' "$tmp/out" && ok || { bad "warm: summary"; cat "$tmp/out"; }
n=$(entries | wc -l)
[ "$n" -eq 5 ] && ok || bad "warm: $n cache entries, expected 5 (2 programs of sdpa, 3 of backward_gqa)"
ATTN_CACHE_DIR="$tmp/cache" "$attnc" cache list >"$tmp/list" 2>&1
grep -q 'backward_gqa.attn backward_gqa (backward)$' "$tmp/list" && ok || { bad "list: no backward program"; cat "$tmp/list"; }
entries >"$tmp/before"
# Again, one thread: every program found, none compiled or written again.
warm "$tmp/err" --arch sm_90a -j 1 examples/backward_gqa.attn examples/sdpa.attn >"$tmp/out"
rc=$?
[ $rc -eq 0 ] && ok || bad "second warm: exit status $rc"
entries >"$tmp/after"
cmp -s "$tmp/before" "$tmp/after" && ok || bad "second warm: the cache changed"
# Refusals: a missing file and an error in a source (status 1, the good file still warmed), and
# their diagnostics; no cache; a bad thread count; no file.
printf 'attention bad {\n  input q : bf16[B, H, S, 64];\n  o = q;\n}\n' >"$tmp/bad.attn"
warm "$tmp/err" --arch sm_80 "$tmp/missing.attn" "$tmp/bad.attn" examples/sdpa.attn >"$tmp/out"
rc=$?
[ $rc -eq 1 ] && ok || bad "bad files: exit status $rc, expected 1"
grep -q "cannot read $tmp/missing.attn" "$tmp/err" && ok || { bad "missing file: message"; cat "$tmp/err"; }
grep -q "^$tmp/bad.attn:3:7: error: " "$tmp/err" && ok || { bad "bad source: no located error"; cat "$tmp/err"; }
grep -q '^warm: examples/sdpa.attn' "$tmp/out" && grep -q '^warm: 1 of 3 files' "$tmp/out" && ok ||
  { bad "bad files: the good one not warmed"; cat "$tmp/out"; }
ATTN_NO_CACHE=1 "$attnc" cache warm examples/sdpa.attn >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 3 ] && grep -q 'ATTN_NO_CACHE is set' "$tmp/err" && ok || bad "ATTN_NO_CACHE: status $rc"
"$attnc" cache warm -j 0 examples/sdpa.attn >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && ok || bad "-j 0: status $rc, expected 2"
"$attnc" cache warm >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && ok || bad "no file: status $rc, expected 2"
# No --arch: GPU 0's target, read once before the workers start (their threads have no CUDA
# context: session 37's device run failed so). Without a GPU, a refusal that names --arch.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  warm "$tmp/err" -j 2 examples/sdpa.attn >"$tmp/out"
  rc=$?
  [ $rc -eq 0 ] && grep -q '^warm: 1 of 1 files' "$tmp/out" && ok ||
    { bad "no --arch on a GPU: status $rc"; cat "$tmp/err"; }
else
  warm "$tmp/err" examples/sdpa.attn >"$tmp/out"
  rc=$?
  [ $rc -eq 3 ] && grep -q 'no GPU to take the target from (name it with --arch)' "$tmp/err" && ok ||
    { bad "no --arch without a GPU: status $rc"; cat "$tmp/err"; }
fi
echo "cache warm: $pass passed, $fail failed"
[ $fail -eq 0 ]
