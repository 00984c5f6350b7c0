#!/usr/bin/env bash
# fwd90_protocol_check.sh: fwd_sm90's barrier protocol (producer, consumer warpgroups, turn ring,
# K/V stages, Q buffer) as modelled in tests/host/fwd90_protocol_model.py, under random
# interleavings, for the default protocol, Q released early in every work tile or only in short
# ones (auto: fwd90_q_early_tiles), and idle warpgroups skipping their work: no deadlock, no
# load into a buffer a GEMM may still read, every warpgroup sees every key tile. The model's
# self-test first: four wrong protocols (a missing release, a missing hand-over, Q released
# before its S GEMM is done, V released before P V is) must each fail. No GPU needed.
set -eu
m=tests/host/fwd90_protocol_model.py
python3 "$m" --self-test --runs 2000
python3 "$m" --q-early --runs 3000
python3 "$m" --skip-idle --runs 3000
python3 "$m" --q-early --skip-idle --runs 3000
python3 "$m" --q-early 3 --skip-idle --runs 3000
