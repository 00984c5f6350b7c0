#!/usr/bin/env bash
# golden.sh ATTNC: what users see, compared byte for byte.
#   tests/diag/NAME.attn   `attnc check` must exit 1 and print NAME.err
#   examples/NAME.attn     `attnc check` must pass; `attnc ir` must print
#                          tests/golden/ir/NAME.ir; `attnc emit --brief` must print
#                          tests/golden/emit/NAME.cu; one with a `grad` line
#                          must print tests/golden/backward/NAME.ir from
#                          `attnc ir --backward`; tests/golden/plan/
#                          NAME.sm_80.plan and NAME.sm_90a.plan from
#                          `attnc plan --arch ARCH`
# UPDATE=1 rewrites the expected files instead (review the diff after).
set -u
attnc=${1:?usage: golden.sh ATTNC}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

verdict() { # verdict NAME OK
  if [ "$2" = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi
}

# compare NAME EXPECTED-FILE ACTUAL-FILE
compare() {
  if [ "${UPDATE:-0}" = 1 ]; then mkdir -p "$(dirname "$2")"; cp "$3" "$2"; verdict "$1" 1; return; fi
  if [ ! -f "$2" ]; then verdict "$1 (no expected file $2)" 0; return; fi
  if cmp -s "$2" "$3"; then verdict "$1" 1; else diff -u "$2" "$3" | head -40; verdict "$1" 0; fi
}

for f in tests/diag/*.attn; do
  [ -e "$f" ] || continue
  name=${f%.attn}
  timeout 5 "$attnc" check "$f" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ]; then verdict "$f: exit status $rc, expected 1" 0; continue; fi
  if [ -s "$tmp/out" ]; then verdict "$f: wrote to stdout" 0; continue; fi
  compare "$f" "$name.err" "$tmp/err"
done

for f in examples/*.attn; do
  [ -e "$f" ] || continue
  name=$(basename "${f%.attn}")
  if ! "$attnc" check "$f" 2>"$tmp/err"; then cat "$tmp/err"; verdict "$f: check" 0; continue; fi
  verdict "$f: check" 1
  "$attnc" ir "$f" >"$tmp/ir" 2>&1
  compare "$f: ir" "tests/golden/ir/$name.ir" "$tmp/ir"
  # A graph the matcher takes has an emitted-CUDA golden (.cu); one it
  # refuses has the expected diagnostics (.err) and exit status 1.
  "$attnc" emit --brief "$f" >"$tmp/cu" 2>"$tmp/err"
  rc=$?
  if [ "${UPDATE:-0}" = 1 ]; then
    rm -f "tests/golden/emit/$name.cu" "tests/golden/emit/$name.err"
    if [ $rc -eq 0 ]; then compare "$f: emit" "tests/golden/emit/$name.cu" "$tmp/cu"
    else compare "$f: emit" "tests/golden/emit/$name.err" "$tmp/err"; fi
  elif [ -f "tests/golden/emit/$name.err" ]; then
    if [ $rc -ne 1 ]; then verdict "$f: emit exit status $rc, expected 1" 0
    else compare "$f: emit" "tests/golden/emit/$name.err" "$tmp/err"; fi
  elif [ $rc -eq 0 ]; then compare "$f: emit" "tests/golden/emit/$name.cu" "$tmp/cu"
  else cat "$tmp/err"; verdict "$f: emit (exit status $rc)" 0; fi
done

# Derived backward graphs: every example that declares grad has its
# `attnc ir --backward` golden in tests/golden/backward/NAME.ir.
for f in examples/*.attn; do
  [ -e "$f" ] || continue
  grep -q '^[[:space:]]*grad[[:space:]]' "$f" || continue
  name=$(basename "${f%.attn}")
  "$attnc" ir --backward "$f" >"$tmp/bwd" 2>&1
  compare "$f: ir --backward" "tests/golden/backward/$name.ir" "$tmp/bwd"
done

# Launch plans: every example the matcher takes has `attnc plan` goldens
# for both targets in tests/golden/plan/NAME.ARCH.plan (kernels, grids,
# tensor maps, workspace slices and their launch-time conditions).
for f in examples/*.attn; do
  [ -e "$f" ] || continue
  name=$(basename "${f%.attn}")
  [ -f "tests/golden/emit/$name.err" ] && continue
  for arch in sm_80 sm_90a; do
    "$attnc" plan --arch "$arch" "$f" >"$tmp/plan" 2>&1
    compare "$f: plan $arch" "tests/golden/plan/$name.$arch.plan" "$tmp/plan"
  done
done

# A file that never ends is refused, not read until memory runs out.
timeout 20 "$attnc" check /dev/zero >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 1 ] && grep -q "larger than 64 MiB" "$tmp/err"; then verdict "check /dev/zero" 1
else cat "$tmp/err"; verdict "check /dev/zero: refused with a message" 0; fi

echo "golden: $pass passed, $fail failed"
[ $fail -eq 0 ]
