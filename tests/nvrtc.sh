#!/usr/bin/env bash
# nvrtc.sh ATTNC: every example the matcher takes is compiled by NVRTC for
# sm_80 and sm_90a, and each result must be a CUDA ELF (magic \177ELF,
# e_machine 190 = EM_CUDA), or refused for a target exactly as its plan
# golden says; and the two programs libattn's JIT makes of a graph with
# grad (attnc compile --part prefill|decode|backward) compile too. Needs no GPU.
set -u
attnc=${1:?usage: nvrtc.sh ATTNC}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# compile ARGS...: attnc compile with stderr in $tmp/err (LeakSanitizer's
# tracer crash retried: tests/lib/lsan_retry.sh).
. "$(dirname "$0")/lib/lsan_retry.sh"
compile() { lsan_retry "$tmp/err" env ATTN_NO_CACHE=1 "$attnc" compile "$@"; }
for f in examples/*.attn; do
  name=$(basename "${f%.attn}")
  [ -f "tests/golden/emit/$name.err" ] && continue # the matcher refuses it
  for arch in sm_80 sm_90a; do
    out="$tmp/$name.$arch.cubin"
    # A target whose plan golden is a located refusal (mla.attn's backward
    # on sm_80) must refuse it the same way, not reach NVRTC.
    plan="tests/golden/plan/$name.$arch.plan"
    if [ -f "$plan" ] && grep -q '^[^ ]*:[0-9]*:[0-9]*: error: ' "$plan"; then
      if ! compile "$f" --arch "$arch" -o "$out" && cmp -s "$plan" "$tmp/err"; then pass=$((pass + 1))
      else cat "$tmp/err"; echo "FAIL: $f for $arch: expected the refusal in $plan"; fail=$((fail + 1)); fi
      continue
    fi
    if ! compile "$f" --arch "$arch" -o "$out"; then
      cat "$tmp/err"; echo "FAIL: $f for $arch"; fail=$((fail + 1)); continue
    fi
    magic=$(od -An -c -N4 "$out" | tr -d ' ')
    machine=$(od -An -tu2 -j18 -N2 "$out" | tr -d ' ')
    if [ "$magic" = '177ELF' ] && [ "$machine" = 190 ]; then pass=$((pass + 1))
    else echo "FAIL: $f for $arch: not a CUDA ELF (magic '$magic', machine '$machine')"; fail=$((fail + 1)); fi
  done
done
# libattn compiles a module as up to three programs (the forward pass's
# main kernels now, its decode kernels and the backward's on first use):
# each compiles for every example with grad, on both targets.
for f in examples/*.attn; do
  name=$(basename "${f%.attn}")
  grep -q '^[[:space:]]*grad[[:space:]]' "$f" || continue
  for arch in sm_80 sm_90a; do
    grep -q ': error: ' "tests/golden/plan/$name.$arch.plan" && continue
    for part in prefill decode backward; do
      if compile "$f" --arch "$arch" --part "$part" -o "$tmp/$name.$arch.$part.cubin"; then
        pass=$((pass + 1))
      else
        cat "$tmp/err"; echo "FAIL: $f for $arch: the $part program"; fail=$((fail + 1))
      fi
    done
  done
done
# Graphs that attnc check accepts must compile (or be refused with a
# located error, never an NVRTC failure): tests/nvrtc/checked/ holds the
# ones that once failed in NVRTC.
for f in tests/nvrtc/checked/*.attn; do
  for arch in sm_80 sm_90a; do
    if "$attnc" check "$f" 2>"$tmp/err" && compile "$f" --arch "$arch" -o "$tmp/checked.cubin"; then
      pass=$((pass + 1))
    else
      cat "$tmp/err"; echo "FAIL: $f (accepted by attnc check) does not compile for $arch"
      fail=$((fail + 1))
    fi
  done
done
# No sm_90a kernel may have its wgmma serialized by ptxas (its "wgmma.mma_async
# instructions are serialized" remarks: C7514, a non-wgmma instruction reads
# an accumulator inside a pipeline stage, cost D 256's backward 11%; C7512,
# too few registers, and C7515 came up with D 64's 128-query tiles): the
# examples and the backward graphs of tests/nvrtc (D 256, D 64 with dropout, FP8).
for f in examples/*.attn tests/nvrtc/bwd_*.attn; do
  name=$(basename "${f%.attn}")
  [ -f "tests/golden/emit/$name.err" ] && continue
  if compile "$f" --arch sm_90a -v -o "$tmp/$name.v.cubin" &&
    ! grep -q 'wgmma.mma_async instructions are serialized' "$tmp/err"; then
    pass=$((pass + 1))
  else
    grep -B1 -A1 'serialized\|error' "$tmp/err"; echo "FAIL: $f for sm_90a: ptxas serializes wgmma or the compile failed"
    fail=$((fail + 1))
  fi
done
# bwd_sm90's FP8 tensor-core mode (ATTN_BWD_TEMPLATE=sm90f8, opt-in): its graphs compile
# with FP8 wgmma (QGMMA in the SASS is not checked here: the PTX's e4m3/e5m2 wgmma
# is), none serialized.
# opt_in TEMPLATE WHAT FILE PATTERN...: FILE's backward under ATTN_BWD_TEMPLATE=TEMPLATE
# compiles with no wgmma serialized, and its PTX holds every PATTERN (grep regexes).
opt_in() {
  local t=$1 what=$2 f=$3 name pat ok=1
  shift 3
  name=$(basename "${f%.attn}")
  if ATTN_BWD_TEMPLATE=$t compile "$f" --arch sm_90a --part backward -v \
       -o "$tmp/$name.$t.cubin" --ptx "$tmp/$name.$t.ptx" &&
    ! grep -q 'wgmma.mma_async instructions are serialized' "$tmp/err"; then
    for pat in "$@"; do grep -q "$pat" "$tmp/$name.$t.ptx" || ok=0; done
  else
    ok=0
  fi
  if [ $ok = 1 ]; then
    pass=$((pass + 1))
  else
    grep -B1 -A1 'serialized\|error' "$tmp/err"; echo "FAIL: $f $what ($t)"
    fail=$((fail + 1))
  fi
}
for f in examples/fp8_train.attn tests/nvrtc/bwd_fp8_mma.attn; do
  opt_in sm90f8 "in the FP8 tensor-core mode" "$f" 'wgmma.mma_async.sync.aligned.m64n128k32.f32.e'
done
# bwd_sm90's 80-query tiles (ATTN_BWD_TEMPLATE=sm90bm80, sm90bm80s with dV's GEMM reading
# P^T from shared memory, sm90bm80late with dV and dK after one pass; opt-in while measured):
# its graphs take the mode (dQ^T's m64n80k16 with A transposed, dS by stmatrix.trans in the
# PTX), none serialized.
for t in sm90bm80 sm90bm80s sm90bm80late; do
  for f in tests/nvrtc/bwd_bm80_*.attn; do
    opt_in $t "with 80-query tiles" "$f" \
      'wgmma.mma_async.sync.aligned.m64n80k16.f32.[bf]*16.[bf]*16 .*, 1, 1, 1, 0;' \
      'stmatrix.sync.aligned.m8n8.x4.trans.shared.b16'
  done
done
# The Hopper fast path: an sm_90a build must use the TMA and wgmma
# instructions (fwd_sm90.cuh), not fall back to the portable template.
ptx="$tmp/sdpa.sm_90a.ptx"
if compile examples/sdpa.attn --arch sm_90a -o "$tmp/sdpa.cubin" --ptx "$ptx" &&
   grep -q 'wgmma.mma_async' "$ptx" &&
   grep -q 'cp.async.bulk.tensor' "$ptx"; then
  pass=$((pass + 1))
else
  cat "$tmp/err"; echo "FAIL: sm_90a PTX of examples/sdpa.attn lacks wgmma.mma_async or cp.async.bulk.tensor"
  fail=$((fail + 1))
fi
echo "nvrtc: $pass passed, $fail failed"
[ $fail -eq 0 ]
