# Sourced by the host checks that compile a template's device function for the host.
#
# device_fn FILE NAME OUT: FILE's function `NAME(float x) {`, from its first line to its closing
# brace in column 0, with its device qualifiers (`[[maybe_unused]] static __device__
# __forceinline__`) made `static inline`, into OUT; fails, naming both, when FILE has no such text.
device_fn() {
  awk -v name="$2" '$0 ~ (name "\\(float x\\) \\{") { on = 1 } on { print } on && /^}/ { on = 0 }' \
    "$1" | sed 's/^\[\[maybe_unused\]\] static __device__ __forceinline__/static inline/' >"$3"
  grep -q "$2(" "$3" || { echo "FAIL: $2's text was not found in $1"; return 1; }
}
