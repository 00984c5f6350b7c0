# Sourced by the shell tests that run the sanitizer build of attnc.
#
# lsan_retry ERR CMD...: runs CMD with its stderr in ERR and returns its
# status. LeakSanitizer's own tracer can crash at exit ("Tracer caught
# signal 11 ... LeakSanitizer has encountered a fatal error", not a leak
# report): it scans a dynamic-TLS block of the dlopen'ed NVRTC whose bounds
# it misreads (LSAN_OPTIONS=verbosity=1 shows "DTLS ... at
# 0x000000000dbf-0x002000001ec1"); seen for examples/gqa.attn on sm_90a in
# nvrtc.sh and for `attnc build -v` in build.sh. Such a run is repeated once
# with use_tls=0 (thread-local storage not scanned as roots; tests/lsan.supp
# names the one glibc block that then shows). A leak LSan reports, or any
# other failure, still fails.
lsan_retry() {
  local err=$1 rc
  shift
  "$@" 2>"$err"
  rc=$?
  if [ $rc -eq 0 ] || ! grep -q 'LeakSanitizer has encountered a fatal error' "$err"; then
    return $rc
  fi
  echo "note: LeakSanitizer's tracer crashed (not a leak); again without TLS roots: $*"
  LSAN_OPTIONS="${LSAN_OPTIONS:-}:use_tls=0" "$@" 2>"$err"
}
