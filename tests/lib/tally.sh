# Sourced by the shell tests: their pass and fail counts (ok, bad NAME) and a
# temporary directory $tmp, removed at exit.
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
