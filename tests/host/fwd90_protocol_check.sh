#!/usr/bin/env bash
# fwd90_protocol_check.sh: fwd_sm90's barrier protocol (producer, consumer warpgroups, turn ring,
# K/V stages, Q buffer) as modelled in tests/host/fwd90_protocol_model.py, under random
# interleavings, for the default protocol, Q released early in every work tile or only in short
# ones (auto: fwd90_q_early_tiles), and idle warpgroups skipping their work, each with the turn
# ring across work tiles (every variant but ring_closed) and closed at each tile's end
# (ring_closed): no deadlock, no load into a buffer a GEMM may still read, no turn barrier
# completed by one warpgroup's two arrivals or left holding a token, every warpgroup sees every
# key tile. The model's self-test first: wrong protocols (a missing release, a missing
# hand-over, Q released before its S GEMM is done, V released before P V is; for the ring
# across tiles also the old tile-end skip, a missing final take, a second opening) must each
# fail. No GPU needed.
set -eu
m=tests/host/fwd90_protocol_model.py
for ring in "" --ring-per-tile; do
  python3 "$m" $ring --self-test --runs 2000
  python3 "$m" $ring --q-early --runs 3000
  python3 "$m" $ring --skip-idle --runs 3000
  python3 "$m" $ring --q-early --skip-idle --runs 3000
  python3 "$m" $ring --q-early 3 --skip-idle --runs 3000
done
# the q_before_v variant (auto's settings otherwise)
python3 "$m" --q-before-v --self-test --runs 2000
python3 "$m" --q-before-v --q-early 3 --skip-idle --runs 3000
python3 "$m" --q-before-v --skip-idle --runs 3000
# the pv_wait_next variant
python3 "$m" --pv-wait-next --self-test --runs 2000
python3 "$m" --pv-wait-next --q-early 3 --skip-idle --runs 3000
python3 "$m" --pv-wait-next --skip-idle --runs 3000
