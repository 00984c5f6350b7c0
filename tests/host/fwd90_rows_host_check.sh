#!/usr/bin/env bash
# fwd90_rows_host_check.sh: fwd_sm90's query-tile geometry (fwd90_rows: tile m's rows [i0, i_end)
# of a sequence of Sq queries), from the template's own text, compiled for the host with and
# without ATTN_PARTIAL_FIRST (the partial_first variant: the short tile first) at query tiles of
# 128 and 192 rows, under ASan and UBSan (FWD90=FILE: another version of the template). For every
# Sq up to 3000: the ceil(Sq / BM) tiles' stored rows partition [0, Sq) in order; every i0 is a
# multiple of 16 (a lane's rows i and i + 8 share a dropout group); the loaded rows
# [i0, i0 + BM) start at or after row 0; by default every tile but the last holds BM rows; under
# partial_first the middle tiles hold BM, the first Sq's remainder rounded up to 16 (or all of
# Sq) and the last at least BM - 15; warpgroup 0 is live in every tile (the turn ring needs it);
# a packed tile no sequence owns (Sq 0) stores nothing. No GPU needed. Run from the repository
# root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
f=${FWD90:-templates/fwd_sm90.cuh}
sed -n "/^\/\* Query tile m's rows of a sequence of Sq queries/,/^}/p" "$f" |
  sed 's/^static __device__ __forceinline__/static inline/' >"$tmp/rows.inc"
grep -q 'void fwd90_rows(int m, int Sq, int &i0, int &i_end)' "$tmp/rows.inc" ||
  { echo "FAIL: fwd90_rows's text was not found in $f"; exit 1; }
cat >"$tmp/check.cpp" <<'CPP'
#include <algorithm>
#include <cstdio>
using std::max;
using std::min;
constexpr int fwd90_bm = BM;
constexpr bool fwd90_partial_first = PF != 0;
#include ROWS
int main() {
  int bad = 0;
  for (int sq = 0; sq <= 3000; ++sq) {
    const int n = (sq + fwd90_bm - 1) / fwd90_bm;
    int next = 0; /* the first row not yet stored */
    for (int m = 0; m < n; ++m) {
      int i0, i_end;
      fwd90_rows(m, sq, i0, i_end);
      const int stored_from = m == 0 ? 0 : i0;
      const int rows = i_end - stored_from;
      const int rem = sq - (sq - 1) / fwd90_bm * fwd90_bm; /* 1 .. BM */
      bool size_ok;
      if (!fwd90_partial_first)
        size_ok = rows == fwd90_bm || m == n - 1;
      else if (m == 0)
        size_ok = rows == std::min((rem + 15) / 16 * 16, sq);
      else
        size_ok = rows == fwd90_bm || (m == n - 1 && rows > fwd90_bm - 16);
      if (stored_from != next || i_end <= stored_from || i_end > sq || i0 < 0 ||
          i0 > stored_from || i_end - i0 > fwd90_bm || i0 % 16 != 0 || !size_ok ||
          !(i0 < i_end)) { /* warpgroup 0's first row stored: i0 + 64 * 0 < i_end */
        if (bad++ < 10)
          std::printf("FAIL: BM %d partial_first %d Sq %d tile %d: rows [%d, %d), expected from %d\n",
                      fwd90_bm, PF, sq, m, i0, i_end, next);
      }
      next = i_end;
    }
    if (next != sq && bad++ < 10)
      std::printf("FAIL: BM %d partial_first %d Sq %d: rows stored up to %d\n", fwd90_bm, PF, sq, next);
  }
  int i0, i_end;
  fwd90_rows(0, 0, i0, i_end); /* a packed tile no sequence owns */
  if (i_end > i0 && bad++ < 10)
    std::printf("FAIL: BM %d partial_first %d: Sq 0 stores rows [%d, %d)\n", fwd90_bm, PF, i0, i_end);
  if (!bad)
    std::printf("PASS: fwd90_rows BM %d partial_first %d, Sq 0-3000\n", fwd90_bm, PF);
  return bad != 0;
}
CPP
fail=0
for bm in 128 192; do
  for pf in 0 1; do
    g++ -std=c++17 -O1 -g -Wall -Werror -fsanitize=address,undefined -DBM=$bm -DPF=$pf \
      -DROWS="\"$tmp/rows.inc\"" -o "$tmp/check" "$tmp/check.cpp"
    "$tmp/check" || fail=1
  done
done
exit $fail
