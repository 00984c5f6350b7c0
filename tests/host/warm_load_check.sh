#!/usr/bin/env bash
# warm_load_check.sh CHECKER: a warm load from the kernel cache does not load NVRTC
# (runtime/nvrtc.c, nvrtc_fingerprint): CHECKER (tests/host/warm_load_check.c) compiles
# examples/sdpa.attn into an empty cache (NVRTC loaded), then again (a hit: NVRTC not loaded).
# Under the sanitizer build LeakSanitizer's tracer can crash scanning NVRTC's thread-local
# storage (tests/nvrtc.sh says why): its TLS roots are off here.
set -u
check=${1:?usage: warm_load_check.sh CHECKER}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ATTN_CACHE_DIR=$tmp/cache LSAN_OPTIONS="${LSAN_OPTIONS:-}:use_tls=0"
cold=$("$check" examples/sdpa.attn) || { echo "FAIL: the cold compile failed"; exit 1; }
warm=$("$check" examples/sdpa.attn) || { echo "FAIL: the warm load failed"; exit 1; }
if [ "$cold" != "nvrtc loaded: yes" ] || [ "$warm" != "nvrtc loaded: no" ]; then
  echo "FAIL: warm load: cold run '$cold', warm run '$warm' (want yes, then no)"
  exit 1
fi
echo "PASS: a warm load from the kernel cache does not load NVRTC"
