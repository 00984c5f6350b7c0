#!/usr/bin/env bash
# device_check.sh [BUILD]: everything that needs the GPU, in one call on the
# device machine (the H200). BUILD is a build folder made on the dev machine
# by `make all test-install` plus the GPU test binaries (default: build).
# A summary is printed last.
set -u
# Knobs: FIRST=1 runs the newest unverified checks first (below), BENCH=0 skips the benchmarks,
# SANITIZE=0 compute-sanitizer, HOST=0 the host examples,
# FWD=0 test_forward, BWD80=0 / BWD90=0 test_backward's template passes, SM80=0
# the portable template's grid, CTAS3=0 the second backward run, PYTEST=0
# the Python package's tests, TESTS=0 the GPU test binaries, REST=0 those after the
# FIRST, FWD and backward steps, BENCH_STEPS a list of the benchmarks to run (names: fa4_selftest
# python_overhead warm_load grid grid_wg3 grid_sm80 variants backward softcap fp8 fp8_wg3 fp8_backward
# fp8_kv varlen paged_prefill decode_paged), FIRST_FWD=1 / FIRST_BENCH=0 the FIRST steps' whole
# test_forward and benchmarks, WG3=1 the wg3 variant's checks. The whole takes
# more than one 600 s device call (test_forward alone ~470 s, each test_backward pass ~350-400 s
# in session 21): run TESTS=1 BENCH=0 SANITIZE=0 in calls of FWD=1 BWD80=0 BWD90=0, then FWD=0
# BWD90=0, then FWD=0 BWD80=0 (with PYTEST=0 HOST=0 on all but one), then
# TESTS=0 HOST=0 PYTEST=0 with the sanitizer, then the benchmarks alone. Logs go to /tmp/attnc-device; what comes
# back from the device machine ($OUT holds at most 8 files) is one .tgz of
# them plus the benchmark tables and plot.
B=${1:-build}
# TAG=name: logs in /tmp/attnc-device-name and $OUT/device-logs-name.tgz, so one device call can
# run several passes (e.g. one with ATTN_SM90_VARIANT set) without overwriting the others.
L=/tmp/attnc-device${TAG:+-$TAG}
rm -rf "$L"
mkdir -p "$L"
export LD_LIBRARY_PATH=$PWD/$B/install/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ATTN_CACHE_DIR=$L/cache PYTHONUNBUFFERED=1
summary=()
step() { # step NAME COMMAND...: runs it, logs it, keeps its last line
  local name=$1; shift
  "$@" >"$L/$name.log" 2>&1
  local rc=$?
  summary+=("$name (rc $rc): $(grep -v '^\s*$' "$L/$name.log" | tail -1)")
  save
}
save() { # what has been logged so far, into $OUT (a call cut short keeps it)
  [ -n "${OUT:-}" ] || return 0
  printf '%s\n' "${summary[@]}" >"$L/summary.txt"
  tar czf "$OUT/device-logs${TAG:+-$TAG}.tgz" --exclude=./cache --exclude=./testcache -C "$L" .
  # (a tagged pass sends its archive alone: $OUT brings back at most 8 files)
  [ -n "${TAG:-}" ] && return 0
  for f in bench-grid.md bench-variants.md bench-backward.md summary.txt; do
    [ -f "$L/$f" ] && cp "$L/$f" "$OUT/$f"
  done
  return 0
}
# A call cut short by its time limit keeps the logs of the step it was in
# too: they are saved every 30 s meanwhile, not only after each step.
# (Their own archive, so it never races the final save.)
( while sleep 30; do [ -n "${OUT:-}" ] &&
    tar czf "$OUT/device-logs${TAG:+-$TAG}-partial.tgz" --exclude=./cache --exclude=./testcache \
      -C "$L" . 2>/dev/null; done ) &
saver=$!
trap 'kill $saver 2>/dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$L/gpu.txt" 2>&1
# libnccl from PyTorch's nvidia-nccl wheel (the ring's transport), when there is one.
NCCL_LIB=${ATTN_NCCL:-$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)}
# Peers' Python packages carried as wheels in .whl/ (the cudnn frontend for cuDNN's FP8 SDPA in
# bench/fp8.py and bench/fp8_backward.py: python3 -m pip download --no-deps ...
# nvidia-cudnn-frontend, docs/STATUS.md).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/attnc-site .whl/*.whl >"$L/pip-wheels.log" 2>&1 &&
    export PYTHONPATH=/tmp/attnc-site${PYTHONPATH:+:$PYTHONPATH}
fi
# FlashAttention-4's precompiled Hopper kernels (.fa4/, bench/fa4_peer.py says how it is made):
# bench.py times them beside cuDNN when ATTN_FA4 names the unpacked bundle.
if ls .fa4/*.tar.xz >/dev/null 2>&1; then
  mkdir -p /tmp/fa4 && for f in .fa4/*.tar.xz; do tar xJf "$f" -C /tmp/fa4; done && export ATTN_FA4=/tmp/fa4
fi
# FlashInfer's prebuilt modules (.fi/, tools/prep_flashinfer.sh): bench/decode.py and
# bench/paged_prefill.py time them in the same process when they import.
if [ -f .fi/site_fi.tar.xz ]; then
  mkdir -p /tmp/site_fi && tar xJf .fi/site_fi.tar.xz -C /tmp/site_fi &&
    export PYTHONPATH=/tmp/site_fi${PYTHONPATH:+:$PYTHONPATH} FLASHINFER_DISABLE_JIT=1
fi
# WARM=0 skips: every example's programs (forward, decode, backward) compiled into a cache on all
# the machine's cores before the tests (`attnc cache warm`), which then read them
# (ATTN_TEST_CACHE_DIR: the same sources, knobs and target, so the same kernels). The examples'
# programs are 78 s of NVRTC one at a time (development machine, 2 cores: 61 s), a third of
# test_forward's examples pass (~240 s on a fresh H100 in session 36); on 16 cores the warm takes
# about the longest file's 14 s. Steps under another ATTN_SM90_VARIANT miss and compile.
if [ "${TESTS:-1}" = 1 ] && [ "${WARM:-1}" = 1 ]; then
  step warm env ATTN_CACHE_DIR="$L/testcache" "$B/install/bin/attnc" cache warm -j "$(nproc)" \
    examples/*.attn
  export ATTN_TEST_CACHE_DIR=$L/testcache
fi
if [ "${TESTS:-1}" = 1 ]; then
# FIRST=1: the quick checks of what changed last without a GPU, before everything else
# (docs/STATUS.md item 0000000000). After session 31: launch overlap's test_plan and decode
# timing (FIRST_OVERLAP=0 skips them), the exponentials on the FMA pipe (FIRST_EXP2=0 skips). After
# session 32: the bn176 and fp8_vt8 variants' tests and A/B timing (FIRST_BN176=0, FIRST_VT8=0 skip). After session 30: the paged tests, the kv_copy variant's
# tests, sanitizer case and speed, the FP8 widening's rate (tools/f2fp_rate.cu, built on the dev
# machine into $B/tools: carry it), then test_head_dims whole (cut short in session 30), then
# the paged FP8 decode beside FlashInfer's (carry .fi).
# FIRST_NCU=1 adds source-level stall samples (tools/ncu_stalls.sh SOURCE=1: the report's SASS
# page as CSV, read on the dev machine with tools/ncu_source_top.py) of the FP8 cache's forward,
# the bf16 one and the FP8 backward's main kernel at D 128. Session 30's own checks all ran
# (bench/RESULTS.md "Session 30").
if [ "${FIRST:-0}" = 1 ]; then
  # Session 46 (ran in session 46's calls 2-4, bench/RESULTS.md; FIRST_S46=0 skips; carry .fa4
  # for the bench): (A, FIRST_S46_AB=1) a backward
  # change per kernel beside BWD_BASE (the commit before it), then its stamps. Call 2 ran the
  # next item's K/V and first Q/dO tile prefetched a few tiles into each item (slower,
  # reverted); call 4 the narrow form (D 64 slower, dropped): the item's first two Q/dO tiles prefetched where its K/V
  # rows already were, two stages before the switch, the queue request unchanged (predicted:
  # the wait 2.4 -> ~1.5 us at D 128 S 1k, main kernel -1 to -2% at S 1k, S 4k within 0.5%); (B, FIRST_S46_BENCH=1) the backward beside cuDNN and FA4 in wall-clock time
  # (bench.py --backward; BENCH_LIB=DIR a library other than $B's); (C, FIRST_S46_TESTS=1)
  # test_backward whole with 3 persistent CTAs (every CTA crosses many items: the K/V maps'
  # coordinates per item; GQA, packed, deterministic, the FP8 copies), then memcheck and
  # racecheck over the bwd_sm90 sanitize cases.
  # (FIRST_S46_SWEEP=1, ~150 s, written in session 46 for the next: never run) Paged decode at B 1
  # ran 13-22% behind dense at the same split count on the H100 in session 46's call 4, where
  # session 43's H100 run, under the old rule (three CTAs an SM for the paged kernel: 49 splits at
  # GQA 32k, 12 at MHA), had it 3-7% behind: the split sweep over a paged cache (page 64), then
  # the dense one, in one process each, to set a paged split rule (plan_decode_splits).
  if [ "${FIRST_S46_SWEEP:-0}" = 1 ]; then
    step first_s46_sweep_paged python3 bench/decode.py --split-sweep --paged --lib "$B/libattn.so" \
      --out "$L"
    step first_s46_sweep_dense python3 bench/decode.py --split-sweep --lib "$B/libattn.so" --out "$L"
  fi
  if [ "${FIRST_S46:-1}" = 1 ] && [ "${FIRST_S46_AB:-1}" = 1 ]; then
    [ -n "${BWD_BASE:-}" ] && step first_s46_bwd_breakdown_base python3 bench/bwd_breakdown.py \
      --lib "$BWD_BASE/libattn.so" --dims 64,128 --seqs 1024,4096
    step first_s46_bwd_breakdown python3 bench/bwd_breakdown.py --lib "$B/libattn.so" \
      --dims 64,128 --seqs 1024,4096
    [ "${FIRST_S46_STAMPS:-1}" = 1 ] && step first_s46_stamps python3 bench/bwd_stamps.py --lib "$B/libattn.so" --dims 128,64 \
      --seqs 1024,4096
  fi
  if [ "${FIRST_S46:-1}" = 1 ] && [ "${FIRST_S46_BENCH:-1}" = 1 ]; then
    step first_s46_bench_backward python3 bench/bench.py --lib "${BENCH_LIB:-$B}/libattn.so" \
      --out "$L" --backward
  fi
  if [ "${FIRST_S46:-1}" = 1 ] && [ "${FIRST_S46_TESTS:-1}" = 1 ]; then
    step first_s46_bwd_ctas3 env ATTN_PERSISTENT_CTAS=3 timeout 300 "$B/tests/gpu/test_backward"
    step first_s46_sanitize env L="$L/sanitize-bwd" CASES=bwd_sm90 TOOLS="memcheck racecheck" \
      RING=0 timeout 150 bash tools/sanitize_device.sh "$B"
  fi
  # Session 45 (FIRST_S45=1 reruns; ~300 s; ran in session 46's first call: all passed, bench/RESULTS.md):
  # session 45's untested kernel patch, bench/runs/2026-12-07-s45/kv_tma.patch (`git apply` it,
  # rebuild, and keep a build of main as BWD_BASE): bwd_sm90 loads each item's K and V by TMA
  # (one thread, two tensor maps ATTN_TMAP_BK/BV, an mbarrier) instead of 64 KB of cp.async
  # copies (the stamps put issuing those at 1.7-2.1 us an item at D 128), and stores dK/dV rows
  # in 16-byte stores after a quad transpose (4.3 us of stores an item at D 128 S 1k). Its
  # tests (test_backward's backward examples with 3 persistent CTAs and with the full grid, the
  # FP8 graphs over 16-bit copies, whose K/V maps name the copies, and the FP8 tensor-core mode,
  # which keeps its copies; head dims 80), then the main kernel per kernel beside cuDNN,
  # BWD_BASE first, then the stamps (bench/bwd_stamps.py: `issue` should fall to ~0).
  if [ "${FIRST_S45:-0}" = 1 ]; then
    step first_s45_bwd90 env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 200 \
      "$B/tests/gpu/test_backward" backward
    step first_s45_bwd90_grid env ATTN_BWD_TEMPLATE=sm90 timeout 120 "$B/tests/gpu/test_backward" \
      backward
    step first_s45_fp8_copies env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 120 \
      "$B/tests/gpu/test_backward" fp8
    step first_s45_bwd90f8 env ATTN_BWD_TEMPLATE=sm90f8 ATTN_PERSISTENT_CTAS=3 timeout 120 \
      "$B/tests/gpu/test_backward" fp8
    step first_s45_head_dims80 timeout 90 "$B/tests/gpu/test_head_dims" hd_80
    [ -n "${BWD_BASE:-}" ] && step first_s45_bwd_breakdown_base python3 bench/bwd_breakdown.py \
      --lib "$BWD_BASE/libattn.so" --dims 64,128 --seqs 1024,4096
    step first_s45_bwd_breakdown python3 bench/bwd_breakdown.py --lib "$B/libattn.so" \
      --dims 64,128 --seqs 1024,4096
    step first_s45_stamps python3 bench/bwd_stamps.py --lib "$B/libattn.so" --dims 128,64 \
      --seqs 1024,4096
  fi
  # Session 43, after its calls (FIRST_S44=1 runs; partly run in session 44): why an 8-bit O staged
  # in shared memory (the o_smem variant) loses 6.6% at FP8 D 128 S 16k non-causal with auto's
  # own tiles. Stall reasons and source counters of the two kernels at that shape: variant_ab.py
  # launches auto's kernel once, then o_smem's once, before timing, so the first two launches
  # are one of each (ncu-stalls.log; read the SASS pages with tools/ncu_source_top.py).
  # Two calls on a warm machine: FIRST_S44_B=0 (the profile, the variant's tests and its A/B,
  # ~400 s), then FIRST_S44_A=0 (the paged prefill, varlen and split benchmarks, ~250 s).
  # (FIRST_S44_TESTS=0 skips the variant's tests, FIRST_S44_AB=0 the profile and the A/B.)
  if [ "${FIRST_S44:-0}" = 1 ] && [ "${FIRST_S44_A:-1}" = 1 ] && [ "${FIRST_S44_AB:-1}" = 1 ]; then
    mkdir -p "$L/ncu-o8"
    step first_s44_ncu_o8 env OUT="$L/ncu-o8" SOURCE=1 bash tools/ncu_stalls.sh attn_f8_fwd 2 \
      python3 bench/variant_ab.py --lib "$B/libattn.so" --out /tmp --fp8 --variants o_smem \
      --dims 128 --seqs 16384
    rm -f "$L"/ncu-o8/*.ncu-rep
    step first_s44_ab64 python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s44ab64" \
      --variants o_smem --dims 64 --seqs 1024,2048,4096 --causal --rounds 3
  fi
  if [ "${FIRST_S44:-0}" = 1 ] && [ "${FIRST_S44_A:-1}" = 1 ] && [ "${FIRST_S44_TESTS:-1}" = 1 ]; then
    # The o_smem variant now stages under partial_first too (masked graphs at head dims up to
    # 64: a short first tile's warps past its rows store no box; auto does not): the work-tile
    # edges (short first tiles at odd lengths), the masked examples and test_head_dims under it,
    # then its A/B at D 64 causal (predicted +1-3% at S 1k, where the grid's lowest row is).
    step first_s44_edges env ATTN_SM90_VARIANT=o_smem ATTN_TEST_ONLY=examples timeout 60 \
      "$B/tests/gpu/test_forward" zzz_no_example
    step first_s44_causal env ATTN_SM90_VARIANT=o_smem ATTN_TEST_ONLY=examples timeout 90 \
      "$B/tests/gpu/test_forward" causal
    step first_s44_window env ATTN_SM90_VARIANT=o_smem ATTN_TEST_ONLY=examples timeout 60 \
      "$B/tests/gpu/test_forward" sliding_window
    step first_s44_head_dims env ATTN_SM90_VARIANT=o_smem timeout 170 "$B/tests/gpu/test_head_dims"
  fi
  if [ "${FIRST_S44:-0}" = 1 ] && [ "${FIRST_S44_B:-1}" = 1 ]; then
    # Paged prefill at D 128: auto stores O from registers over a paged cache (three stages);
    # the o_smem variant trades the third stage for O's two staging slots there, as auto does
    # in dense masked graphs. Auto, then o_smem, two processes (~2 x 60 s; carry .fi for
    # FlashInfer). If o_smem wins, drop `!paged` from O_STAGE_16 in tmpl_sm90.c.
    step first_s44_paged_prefill python3 bench/paged_prefill.py --lib "$B/libattn.so" --out "$L"
    step first_s44_paged_prefill_os python3 bench/paged_prefill.py --lib "$B/libattn.so" \
      --out "$L" --variant o_smem
    # (packed D 64 runs the short first tile too: packed over dense under the variant, ~40 s)
    step first_s44_varlen python3 bench/varlen.py --lib "$B/libattn.so" --out "$L" --tables equal \
      --variant o_smem
    # The decode's split rule at small batches (B 1 rows 1-13% behind cuDNN on the H100): every
    # forced split count beside the plan's (bench/decode.py --split-sweep, ~60 s).
    step first_s44_splits python3 bench/decode.py --split-sweep --lib "$B/libattn.so" --out "$L"
  fi
  # Session 44 (FIRST_S44_C=1, ~200 s): where the backward's main kernel loses at S 1k. A linear
  # fit of session 43's backward table (main kernel = passes subtracted) gives about 19 us a work
  # item at D 128 (11 at D 64) that does not scale with the item's query tiles, a third of the
  # S 1k kernel. The per-kernel times at S 1k and 4k (torch.profiler), then the main kernel's
  # stall reasons and source counters at D 128 S 1k and S 4k (read the SASS pages with
  # tools/ncu_source_top.py: do the consumers wait in load_kv's copies and barriers, in
  # finish_item's stores, or on the first tile of an item?).
  # Session 44's own changes (FIRST_S44_D=1, ~250 s; ran in session 44's first call, all passed),
  # checked before they are timed: the backward issuing the next item's K/V copies before this
  # item's dK/dV stores (bwd_sm90; test_backward's backward examples and FP8 graphs with 3
  # persistent CTAs, so every CTA crosses many items), and the decode examples (a fused merge in
  # the decode kernel, since removed: measured slower). Then (FIRST_S44_SWEEP=1) the split sweep.
  if [ "${FIRST_S44_D:-0}" = 1 ]; then
    step first_s44_bwd90 env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 200 \
      "$B/tests/gpu/test_backward" backward
    step first_s44_bwd90f8 env ATTN_BWD_TEMPLATE=sm90f8 ATTN_PERSISTENT_CTAS=3 timeout 120 \
      "$B/tests/gpu/test_backward" fp8
    step first_s44_masked_rows env ATTN_TEST_ONLY=examples timeout 60 "$B/tests/gpu/test_forward" \
      zzz_no_example
    for ex in sdpa gqa.attn paged_kv sinks.attn; do
      step "first_s44_decode_$ex" env ATTN_TEST_ONLY=examples timeout 120 "$B/tests/gpu/test_forward" "$ex"
    done
  fi
  [ "${FIRST_S44_SWEEP:-0}" = 1 ] &&
    step first_s44_splits_merge python3 bench/decode.py --split-sweep --lib "$B/libattn.so" --out "$L"
  # BWD_BASE=DIR: a libattn.so built before the change under test, timed first the same way.
  if [ "${FIRST_S44_C:-0}" = 1 ]; then
    [ -n "${BWD_BASE:-}" ] && step first_s44_bwd_breakdown_base python3 bench/bwd_breakdown.py \
      --lib "$BWD_BASE/libattn.so" --dims 64,128 --seqs 1024,4096
    step first_s44_bwd_breakdown python3 bench/bwd_breakdown.py --lib "$B/libattn.so" \
      --dims 64,128 --seqs 1024,4096
    for s in ${NCU_BWD_SEQS:-1024 4096}; do
      mkdir -p "$L/ncu-bwd$s"
      step "first_s44_ncu_bwd$s" env OUT="$L/ncu-bwd$s" SOURCE=1 bash tools/ncu_stalls.sh bwd_main 1 \
        python3 bench/bwd_breakdown.py --lib "$B/libattn.so" --dims 128 --seqs "$s" --reps 1
      rm -f "$L/ncu-bwd$s"/*.ncu-rep
    done
  fi
  # Session 43 (ran in session 43's call 6: bench/RESULTS.md "Session 43"; FIRST_S43=1 reruns;
  # ~150 s): an 8-bit O under o_smem against auto in four rounds of alternating order
  # (variant_ab.py --rounds), and auto against o_regs in bf16 the same way.
  if [ "${FIRST_S43:-0}" = 1 ]; then
    step first_s43_ab8 python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s43ab8" --fp8 \
      --variants o_smem --dims 128,256 --seqs 1024,4096,16384 --causal --rounds 4
    step first_s43_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s43ab" \
      --variants o_regs --dims 128 --seqs 1024,4096,16384 --causal --rounds 4
  fi
  # Session 42 (ran in session 43, bench/RESULTS.md "Session 43"; FIRST_S42=1 reruns; ~550 s): the o_smem variant (24) now keeps auto's
  # key tiles and takes the staging slots the room they leave holds (D 128 plain: key tiles of
  # 176 and one slot for two column blocks, a block's TMA store waiting for the last to read its
  # slot; a mask's D 128: two stages of 128 and both slots, what session 41's o_smem measured
  # +2-10% on causal; D 192 all three; D 256 none), and stages an 8-bit O too (128 columns a
  # slot; FP8 D 256 trades its third stage for two slots). Its A/B against auto first (the
  # decision: predicted D 128 S 1k +8%, S 16k non-causal within 1% of auto), the FP8 A/B
  # (e4m3 O; predicted +5-10% at S 1k), the ALiBi A/B (a score reading a table: causal, two
  # stages and both slots against three stages), then its work-tile edges, test_head_dims
  # (every slot count), test_fp8 and the examples under it.
  # (FIRST_S42_AB=0 skips the three A/Bs, FIRST_S42_TESTS=0 the tests: two calls on a warm machine)
  if [ "${FIRST_S42:-0}" = 1 ] && [ "${FIRST_S42_AB:-1}" = 1 ]; then
    step first_s42_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s42ab" \
      --variants o_smem --dims 64,128 --seqs 1024,2048,4096,16384 --causal
    step first_s42_ab8 python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s42ab8" --fp8 \
      --variants o_smem --dims 64,128,256 --seqs 1024,4096,16384 --causal
    # (ALiBi reads a table: causal, it takes the masked list, where o_smem trades a stage)
    step first_s42_abal python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s42abal" --alibi \
      --variants o_smem --dims 128 --seqs 1024,4096,16384 --causal
  fi
  if [ "${FIRST_S42:-0}" = 1 ] && [ "${FIRST_S42_TESTS:-1}" = 1 ]; then
    step first_s42_fp8 env ATTN_SM90_VARIANT=o_smem timeout 150 "$B/tests/gpu/test_fp8"
    step first_s42_edges env ATTN_SM90_VARIANT=o_smem ATTN_TEST_ONLY=examples timeout 60 \
      "$B/tests/gpu/test_forward" zzz_no_example
    step first_s42_head_dims env ATTN_SM90_VARIANT=o_smem timeout 170 "$B/tests/gpu/test_head_dims"
    step first_s42_examples env ATTN_SM90_VARIANT=o_smem ATTN_TEST_ONLY=examples timeout 200 \
      "$B/tests/gpu/test_forward"
  fi
  # Session 41 (ran in session 42, bench/RESULTS.md "Session 42"; FIRST_S41=1 reruns it): auto now
  # commits FP8 P V's group in its branch at head dims up to 128 (the kernels are byte-identical
  # to the pv_overlap variant's, which passed test_fp8 96/96 on the H100). The FP8 examples and
  # test_fp8 under the new auto, then auto against pv_once (the old FP8 commit) at D 64/128.
  # (q_before_v and pv_wait_next were measured there: opt-in; FIRST_S41_OLD=1 reruns their A/B.)
  # (Its o_smem steps ran in session 42 and were removed: o_smem has changed since; FIRST_S44
  # checks the current one.)
  if [ "${FIRST_S41:-0}" = 1 ]; then
    step first_s41_fp8_examples env ATTN_TEST_ONLY=examples timeout 120 "$B/tests/gpu/test_forward" fp8
    step first_s41_test_fp8 timeout 150 "$B/tests/gpu/test_fp8"
    step first_s41_ab8 python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s41ab8" --fp8 \
      --causal --variants pv_once --dims 64,128 --seqs 1024,4096,16384
  fi
  if [ "${FIRST_S41_OLD:-0}" = 1 ]; then
    step first_s41_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s41ab" \
      --variants q_before_v,pv_wait_next,ring_closed --dims 64,128,256 --seqs 1024,4096 --causal
  fi
  # Session 40 (ran in session 42: examples 684/684, test_head_dims 265/265, test_forward's rest
  # 512/512; FIRST_S40=1 reruns; ~700 s, two calls on a warm machine: FIRST_S40_B=0 then
  # FIRST_S40_A=0): fwd_sm90's turn ring now runs across work tiles (every forward kernel).
  # Seen on an H100: packed 79/79, examples 438/438 until the call's limit (at paged_kv),
  # test_head_dims 209/209 until its limit (D 112), synccheck and racecheck clean on the
  # fwd_sm90, packed and FP8 sanitize cases. Not run: the rest of those and test_forward's rest.
  if [ "${FIRST_S40:-0}" = 1 ]; then
    if [ "${FIRST_S40_A:-1}" = 1 ]; then
      step first_s40_examples env ATTN_TEST_ONLY=examples timeout 330 "$B/tests/gpu/test_forward"
      step first_s40_head_dims timeout 200 "$B/tests/gpu/test_head_dims"
    fi
    if [ "${FIRST_S40_B:-1}" = 1 ]; then
      step first_s40_rest env ATTN_TEST_ONLY=rest timeout 250 "$B/tests/gpu/test_forward"
    fi
  fi
  # Session 39 (ran in session 42: sm90 144/144, sm80 117/117; FIRST_S39=1 reruns; a call of its
  # own on a warm machine, ~300 s): two backward
  # changes, seen on the GPU only in part (the FP8 group and the bias examples). bwd_sm90 keeps each tile's amax(dS) in a shared word (not a register
  # across the key loop: ptxas serialized the D 88-128 kernels); the bias-gradient hooks of both
  # backward templates take int subscripts (attn_offset_idx; D 256 with a bias gradient under a
  # mask serialized). test_backward's sm90 pass (its new amax_ds_d96 case, the FP8 graphs, d256_bias)
  # and its sm80 pass (the bias hooks).
  if [ "${FIRST_S39:-0}" = 1 ]; then
    step first_s39_bwd90 env ATTN_BWD_TEMPLATE=sm90 timeout 250 "$B/tests/gpu/test_backward"
    step first_s39_bwd80 env ATTN_BWD_TEMPLATE=sm80 timeout 200 "$B/tests/gpu/test_backward"
  fi
  # Session 38 (ran in session 39 but for the grid beside FA4: bench/RESULTS.md "Session 39";
  # FIRST_S38=1 reruns it): auto now puts a sequence's short query tile first in masked
  # graphs on three consumer warpgroups (partial_first's rule, its first tile rounded up to 16
  # rows after a dropout example failed unrounded) and runs packed graphs on three. Never run as
  # auto. Two calls on a warm H100: FIRST_S38_B=0 (~420 s): the work-tile-edges test alone
  # (its D 64 causal dropout cases run the rounded short tile), partial_first's failed dropout
  # example, test_forward's examples and test_head_dims; then FIRST_S38_A=0 (~300 s, carry
  # .fa4): test_forward's rest (packed on three warpgroups with the short tile first), the grid
  # beside cuDNN and FA4, and packed against dense.
  if [ "${FIRST_S38:-0}" = 1 ]; then
    if [ "${FIRST_S38_A:-1}" = 1 ]; then
      step first_s38_edges env ATTN_TEST_ONLY=examples timeout 90 "$B/tests/gpu/test_forward" \
        zzz_no_example
      step first_s38_pf_dropout env ATTN_SM90_VARIANT=partial_first ATTN_TEST_ONLY=examples \
        timeout 60 "$B/tests/gpu/test_forward" dropout
      step first_s38_examples env ATTN_TEST_ONLY=examples timeout 300 "$B/tests/gpu/test_forward"
      step first_s38_head_dims timeout 150 "$B/tests/gpu/test_head_dims"
    fi
    if [ "${FIRST_S38_B:-1}" = 1 ]; then
      step first_s38_rest env ATTN_TEST_ONLY=rest timeout 250 "$B/tests/gpu/test_forward"
      step first_s38_grid python3 bench/bench.py --lib "$B/libattn.so" --out "$L"
      step first_s38_varlen python3 bench/varlen.py --lib "$B/libattn.so" --out "$L" --tables equal
    fi
  fi
  # Session 37 (ran in session 38: bench/RESULTS.md "Session 38"; FIRST_S37=1 reruns it): auto now runs masked dense 16-bit graphs at head tiles up to
  # 64 on three consumer warpgroups (the wg3 variant's kernel there, whose examples passed on the
  # H100: +5-18% at D 64 causal S 2k-16k, -3% at 1k). Never run as auto: its examples and
  # test_head_dims (D 32-64 masked graphs), then wg3 over test_forward's paged and packed tests
  # (auto keeps those on two until they pass on three), then auto beside auto36 (the old auto)
  # at D 64 causal. ~450 s on a warm H100.
  if [ "${FIRST_S37:-0}" = 1 ]; then
    step first_s37_examples env ATTN_TEST_ONLY=examples timeout 300 "$B/tests/gpu/test_forward"
    step first_s37_head_dims timeout 150 "$B/tests/gpu/test_head_dims"
    step first_s37_wg3_rest env ATTN_SM90_VARIANT=wg3 ATTN_TEST_ONLY=rest timeout 250 \
      "$B/tests/gpu/test_forward"
    step first_s37_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s37ab" \
      --variants auto36 --dims 64 --seqs 1024,2048,4096,8192,16384 --causal
  fi
  # The partial_first variant (session 37; ran in session 38; FIRST_S37_PF=1, a call of its own, ~500 s):
  # a sequence's short query tile first instead of last (tmpl_sm90.c says why). Its sanitize
  # cases, its examples, test_forward's rest half under it, then beside auto at D 64 causal
  # (192-row tiles: S 1k-16k all leave a short tile; predicted +7% at 1k, +1-2% at 2k-4k) and
  # D 128 (128-row tiles divide S: the control, expected 1.00).
  if [ "${FIRST_S37_PF:-0}" = 1 ]; then
    step first_pf_sanitize env L="$L/sanitize-pf" CASES=partial_first TOOLS="memcheck racecheck" \
      RING=0 bash tools/sanitize_device.sh "$B"
    step first_pf_examples env ATTN_SM90_VARIANT=partial_first ATTN_TEST_ONLY=examples timeout 260 \
      "$B/tests/gpu/test_forward"
    step first_pf_rest env ATTN_SM90_VARIANT=partial_first ATTN_TEST_ONLY=rest timeout 170 \
      "$B/tests/gpu/test_forward"
    step first_pf_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/pfab" \
      --variants partial_first --dims 64,128 --seqs 1024,2048,4096,8192 --causal
  fi
  # FIRST_S37_NCU=1: where D 128 S 1k non-causal goes (0.87x cuDNN, 0.90x FA4 in session 37's
  # grid; 6 key tiles of 176 a work tile): stall reasons, issue and pipe activity of sdpa's
  # forward at the grid's shape (B 16, H 16), tools/ncu_stalls.sh, ~60 s.
  if [ "${FIRST_S37_NCU:-0}" = 1 ]; then
    mkdir -p "$L/ncu-s1k"
    step first_ncu_s1k env OUT="$L/ncu-s1k" bash tools/ncu_stalls.sh attn_sdpa_fwd 1 \
      "$B/install/bin/attnc" run examples/sdpa.attn --shape B=16,H=16,Sq=1024,Skv=1024 --bench
    # cuDNN's forward at the same shape (its kernel's last launch of three: warm)
    mkdir -p "$L/ncu-s1k-cudnn"
    step first_ncu_s1k_cudnn env OUT="$L/ncu-s1k-cudnn" bash tools/ncu_stalls.sh \
      'cudnn|sdpa|fmha|flash' 3 python3 bench/sdpa_once.py --dim 128 --seq 1024
  fi
  # Session 36 (ran in session 37, H100: bench/RESULTS.md "Session 37"; FIRST_S36=1 reruns it): auto's new idle-warpgroup skip and early Q release passed the
  # examples, test_fp8 and test_head_dims but test_forward's other half was cut short (call 4);
  # that half first (`rest`: paged, packed, tile counts, dropout, separable and document tests).
  # Then wg3 for masked graphs at D 64 (three consumer warpgroups; +15% at S 8k causal, -6.5% at
  # 1k on the H100): its examples (never run with the skip), then beside auto at D 64 causal over
  # the grid's sequence lengths, to decide whether auto takes it (docs/STATUS.md).
  if [ "${FIRST_S36:-0}" = 1 ]; then
    step first_s36_rest env ATTN_TEST_ONLY=rest timeout 400 "$B/tests/gpu/test_forward"
    if [ "${S36_WG3:-1}" = 1 ]; then
      step first_wg3_examples env ATTN_SM90_VARIANT=wg3 ATTN_TEST_ONLY=examples \
        timeout 300 "$B/tests/gpu/test_forward"
      grep -q " 0 failed" "$L/first_wg3_examples.log" &&
        step first_s36_wg3 python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s36wg3" \
          --variants wg3 --dims 64 --seqs 1024,2048,4096,8192,16384 --causal
    fi
  fi
  # Session 35 (ran in session 36, H100: bench/RESULTS.md "Session 36"; FIRST_S35=1 reruns it;
  # variant 17 is now auto35, session 35's auto, and idle_wg's skip is auto's): two
  # variants of the work tile's edges. q_early: Q released to the producer after the tile's last
  # S GEMM, so the next tile's Q loads under the last softmax, P V and O's store (predicted S 1k
  # +2-4%, S >= 4k < 1%). idle_wg: a consumer warpgroup whose rows all lie past the sequence's end
  # skips the tile's GEMMs and softmax (predicted D 64 S 1k +6-10%: two of the last 192-row
  # tile's three warpgroups). Each variant's examples (odd lengths: the idle path), FP8, head dim
  # and packed tests under time limits (a hang must not eat the call; ~370 s a variant:
  # S35_VARIANTS=q_early first, then idle_wg with S35_AB=q_early,idle_wg), then the passing ones
  # beside auto at S 1k, 2k and 8k (the rel err columns must match auto's to the bit); the
  # tanh_poly variant (below); and wg3 (three consumer warpgroups, now with the branch commits)
  # beside auto at D 64 causal, the grid's weakest rows.
  if [ "${FIRST_S35:-0}" = 1 ]; then
    ok35=
    for v in ${S35_VARIANTS:-q_early auto35}; do
      step first_${v}_examples env ATTN_SM90_VARIANT=$v ATTN_TEST_ONLY=examples \
        timeout 300 "$B/tests/gpu/test_forward"
      step first_${v}_fp8 env ATTN_SM90_VARIANT=$v timeout 200 "$B/tests/gpu/test_fp8"
      step first_${v}_head_dims env ATTN_SM90_VARIANT=$v timeout 200 "$B/tests/gpu/test_head_dims"
      # (packed batches: every sequence ends in a partial tile, and unowned tiles have no rows)
      step first_${v}_packed env ATTN_SM90_VARIANT=$v ATTN_TEST_ONLY=packed \
        timeout 150 "$B/tests/gpu/test_forward"
      # (beside auto only if all four passed: a variant that fails a check is not timed)
      ok=1
      for c in examples fp8 head_dims packed; do
        grep -q " 0 failed" "$L/first_${v}_$c.log" || ok=0
      done
      [ $ok = 1 ] && ok35=${ok35:+$ok35,}$v
    done
    if [ -n "$ok35" ]; then
      step first_s35_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s35" \
        --variants "${S35_AB:-$ok35}" --dims 64,128,256 --seqs 1024,2048,8192 --causal
    fi
    # tanh_poly (variant 18): a softcap's tanh on the FMA pipe where a tile's arguments lie in
    # [-1, 1]: the softcap examples under it, then the softcap's cost over plain under auto and
    # under it (bench/exp2_fma.py, one process each; predicted D 128 +31% -> +10-20%).
    if [ "${S35_TANH:-1}" = 1 ]; then
      # ("softcap": test_forward's softcap ranges, where the polynomial, tanh.approx and both
      # kinds of warp run, and the two softcap examples)
      for f in softcap gemma2_local; do
        step "first_tanh_poly_$f" env ATTN_SM90_VARIANT=tanh_poly ATTN_TEST_ONLY=examples \
          timeout 120 "$B/tests/gpu/test_forward" "$f"
      done
      if grep -q " 0 failed" "$L/first_tanh_poly_softcap.log"; then
        step first_tanh_auto python3 bench/exp2_fma.py --lib "$B/libattn.so" --out "$L/tanh-auto" \
          --settings none
        step first_tanh_poly python3 bench/exp2_fma.py --lib "$B/libattn.so" --out "$L/tanh-poly" \
          --variant tanh_poly --settings none
      fi
    fi
    [ "${S35_WG3:-1}" = 1 ] && step first_s35_wg3 python3 bench/variant_ab.py --lib "$B/libattn.so" \
      --out "$L/s35wg3" --variants wg3 --dims 64 --seqs 1024,2048,8192 --causal
  fi
  # Session 34 (ran in session 35, H100: bench/RESULTS.md "Session 35"; FIRST_S34=1 reruns it,
  # S34_VARIANTS=one name and S34_AB=a list to split it over calls): two variants of the
  # consumer's wgmma groups.
  # pv_overlap: P V's group committed in its own branch, so the wait for S stops waiting for the
  # previous P V too (auto's SASS waited for both: a dummy HGMMA closed a third group; session 34's
  # ncu put 21% of the D 128 forward's stall samples at that HGMMA and wait). rescale_late: the
  # same commits, and O's rescale after the next S GEMM's issue (its first build hung on a
  # warp-divergent wgmma fence, fixed, not yet run). Each variant's examples and FP8 tests first,
  # with a time limit (a hang must not eat the call), then both beside auto in one process (same
  # tensors: the rel err columns must match auto's to the bit), bf16 D 64/128/256 and FP8 128/256.
  if [ "${FIRST_S34:-0}" = 1 ]; then
    ok34=  # the variants whose examples passed (a hang or failure keeps a variant out of the A/B)
    for v in ${S34_VARIANTS:-pv_overlap rescale_late}; do  # S34_VARIANTS: a subset, one call each
      step first_${v}_examples env ATTN_SM90_VARIANT=$v ATTN_TEST_ONLY=examples \
        timeout 300 "$B/tests/gpu/test_forward"
      step first_${v}_fp8 env ATTN_SM90_VARIANT=$v timeout 200 "$B/tests/gpu/test_fp8"
      grep -q " 0 failed" "$L/first_${v}_examples.log" && ok34=${ok34:+$ok34,}$v
    done
    if [ -n "$ok34" ]; then
      step first_s34_ab python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s34" \
        --variants "${S34_AB:-$ok34}" --dims 64,128,256 --seqs 2048,8192 --causal
      step first_s34_ab_fp8 python3 bench/variant_ab.py --lib "$B/libattn.so" --out "$L/s34f8" \
        --variants "${S34_AB:-$ok34}" --dims 128,256 --seqs 4096,8192 --fp8
    fi
  fi
  # Session 34, then: O's rescale skip fixed (attn_alpha: alpha exactly 1 where a row keeps its
  # maximum; it almost never was). Every variant above includes it, so its own effect is an A/B of
  # libraries: $B/libattn_old.so built from the commit before it (docs/STATUS.md says how), same
  # tensors, two rounds; values differ in the last bits (alpha was 1 +- an ulp), so the rel err
  # columns agree only to about 1e-6. Ran in session 35 (+5.5%); FIRST_S34_ALPHA=1 reruns it.
  if [ "${FIRST_S34_ALPHA:-0}" = 1 ] && [ -f "$B/libattn_old.so" ]; then
    step first_alpha_ab env OUT="$L/alpha-ab" ROUNDS=2 \
      bash tools/ab_libs.sh "$B/libattn_old.so" "$B/libattn.so" --seqs 2048,8192
  fi
  # Session 34, after those: the exponentials' split between MUFU and the FMA pipe again, under
  # pv_overlap (it lost 3-11% in session 32 while the softmax waited for P V as well; with P V
  # under the softmax, MUFU's 8 clocks an ex2 per warp are the exp block's floor: session 34's
  # ncu put 10.5% of D 128's samples on MUFU's fixed-latency wait). Ran in session 35 under the
  # new auto (which commits as pv_overlap does): the split still loses; FIRST_S34_EXP2=1 reruns it.
  if [ "${FIRST_S34_EXP2:-0}" = 1 ]; then
    step first_exp2_overlap python3 bench/exp2_fma.py --lib "$B/libattn.so" --out "$L/exp2ov" \
      --variant pv_overlap --settings none,1/4 --dims 64,128
  fi
  # Session 33 (ran in session 34, H100: bench/RESULTS.md "Session 34"; FIRST_S33=1 reruns it): the tile-count test fixed for key tiles of 176,
  # every example on the softmax whose row maxima are trees (values bit for bit the chain's),
  # then the trees' speed against the build before them (tools/ab_libs.sh, where $B/libattn_old.so
  # is that build: docs/STATUS.md says how to make it; carry .fa4 for FA4's column), and the
  # softcap's cost over plain.
  if [ "${FIRST_S33:-0}" = 1 ]; then
    step first_tiles env ATTN_TEST_ONLY=tiles "$B/tests/gpu/test_forward"
    step first_examples env ATTN_TEST_ONLY=examples "$B/tests/gpu/test_forward"
    [ -f "$B/libattn_old.so" ] && step first_tree_ab env OUT="$L/tree-ab" \
      bash tools/ab_libs.sh "$B/libattn_old.so" "$B/libattn.so"
    step first_softcap python3 bench/exp2_fma.py --lib "$B/libattn.so" --out "$L/softcap" \
      --settings none
  fi
  # Every group below ran in session 32 (H100, bench/RESULTS.md "Session 32"), so each is now
  # opt-in: FIRST_OVERLAP=1, FIRST_BN176=1, FIRST_VT8=1, FIRST_EXP2=1, FIRST_S30=1 rerun them.
  # Launch overlap (session 31, never run): every step launched with programmatic stream
  # serialization; test_plan compares plain, not-overlapped and back-to-back launches, then the
  # dense decode's quick grid times both (its "not overlapped" column).
  if [ "${FIRST_OVERLAP:-0}" = 1 ]; then
    step first_plan "$B/tests/gpu/test_plan"
    step first_decode_overlap python3 bench/decode.py --quick --lib "$B/libattn.so" --out "$L/overlap"
  fi
  # The bn176 variant (session 32, never run): key tiles of 176 at head tiles of 128 for dense
  # unmasked 16-bit graphs (FA3's tile). The examples it takes (and the fully masked rows), then
  # its speed beside auto's and cuDNN's at D 128 (bench/variant_ab.py). FIRST_BN176=0 skips.
  if [ "${FIRST_BN176:-0}" = 1 ]; then
    for f in sdpa mqa dropout; do
      step "first_bn176_$f" env ATTN_SM90_VARIANT=bn176 ATTN_TEST_ONLY=examples \
        "$B/tests/gpu/test_forward" "$f"
    done
    step first_bn176_bench python3 bench/variant_ab.py --variants bn176 --dims 128 \
      --lib "$B/libattn.so" --out "$L/bn176"
  fi
  # The fp8_vt8 variant (session 32, never run): FP8 P V's V^T in 8 bits, so D 256 takes key
  # tiles of 128 (two stages, consumers at 240 registers) and D <= 128 four stages: test_fp8
  # under it, then its speed beside auto's at D 256 and 128 (FIRST_VT8=0 skips).
  if [ "${FIRST_VT8:-0}" = 1 ]; then
    step first_vt8_test_fp8 env ATTN_SM90_VARIANT=fp8_vt8 "$B/tests/gpu/test_fp8"
    step first_vt8_bench python3 bench/variant_ab.py --fp8 --variants fp8_vt8 --dims 256,128 \
      --seqs 1024,4096,8192,16384 --lib "$B/libattn.so" --out "$L/vt8"
  fi
  # The softmax's exponentials on the FMA pipe (session 31, never run; ATTN_EXP2_FMA=4: every
  # exponential there, the most of the new code): fully masked rows and the softcapped, windowed
  # and sink examples against the reference, then the split's speed per head dim
  # (bench/exp2_fma.py: plain and softcap at none to four quarters).
  if [ "${FIRST_EXP2:-0}" = 1 ]; then
    for f in softcap gemma2 sinks sdpa; do
      step "first_exp2_fma_$f" env ATTN_EXP2_FMA=4 ATTN_TEST_ONLY=examples "$B/tests/gpu/test_forward" "$f"
    done
    step first_exp2_fma_bench python3 bench/exp2_fma.py --lib "$B/libattn.so" --out "$L/exp2_fma"
  fi
  # FIRST_S30=0 stops here (session 30's steps below need a call of their own).
  if [ "${FIRST_S30:-0}" = 1 ]; then
  # (the paged set: session 30's two-stage paged FP8 decode was checked only by the decode bench)
  step first_paged env ATTN_TEST_ONLY=paged "$B/tests/gpu/test_forward"
  # The kv_copy variant (session 30, never run): the FP8-cache tests under it, its sanitize case
  # (the widen_kv step and the forward over the copies), then its speed beside the default's
  # (D 256 too: the copies make an FP8 cache at D 256 fit fwd_sm90, whose default is fwd_sm80).
  step first_kv_copy env ATTN_SM90_VARIANT=kv_copy ATTN_TEST_ONLY=fp8_kv "$B/tests/gpu/test_forward"
  step first_sanitize_kv_copy env L="$L/sanitize-kv-copy" CASES=kv_copy TOOLS="memcheck racecheck initcheck" \
    RING=0 bash tools/sanitize_device.sh "$B"
  [ "${FIRST_BENCH:-1}" = 1 ] && step first_kv_copy_bench env ATTN_SM90_VARIANT=kv_copy \
    python3 bench/fp8_kv.py --dims 64,128,192,256 --lib "$B/libattn.so" --out "$L/kv_copy"
  [ -x "$B/tools/f2fp_rate" ] && step first_f2fp_rate "$B/tools/f2fp_rate"
  step first_head_dims "$B/tests/gpu/test_head_dims"
  [ "${FIRST_FWD:-0}" = 1 ] && step first_forward "$B/tests/gpu/test_forward"
  if [ "${FIRST_BENCH:-1}" = 1 ]; then
    step first_decode_fp8 python3 bench/decode.py --fp8 --quick --lib "$B/libattn.so" --out "$L"
  fi
  fi
  if [ "${FIRST_NCU:-0}" = 1 ]; then
    # (launches 1-3 of attn_kv_fwd: the FP8 cache on fwd_sm90, on fwd_sm80, the bf16 cache)
    mkdir -p "$L/ncu-kv" "$L/ncu-bwd"
    step first_ncu_kv env OUT="$L/ncu-kv" SOURCE=1 bash tools/ncu_stalls.sh attn_kv_fwd 3 \
      python3 bench/fp8_kv.py --dims 128 --seqs 8192 --lib "$B/libattn.so" --out /tmp
    step first_ncu_bwd env OUT="$L/ncu-bwd" SOURCE=1 bash tools/ncu_stalls.sh bwd_main 1 \
      python3 bench/fp8_backward.py --profile 128,4096 --modes fp8_mma --lib "$B/libattn.so" --out /tmp
    rm -f "$L"/ncu-*/*.ncu-rep # (the CSVs hold what is read; the reports are large)
  fi
fi
# WG3=1: fwd_sm90's wg3 variant (three consumer warpgroups at head dims up to 64 and for FP8 P V
# at 128): every example at every head dim, test_fp8 and the FP8-cache tests (kv8 takes wg3 only
# in the variant), and below its grids beside the default's.
[ "${WG3:-0}" = 1 ] && step wg3_head_dims env ATTN_SM90_VARIANT=wg3 "$B/tests/gpu/test_head_dims"
[ "${WG3:-0}" = 1 ] && step wg3_fp8 env ATTN_SM90_VARIANT=wg3 "$B/tests/gpu/test_fp8"
[ "${WG3:-0}" = 1 ] && step wg3_fp8_kv env ATTN_SM90_VARIANT=wg3 ATTN_TEST_ONLY=fp8_kv \
  "$B/tests/gpu/test_forward"
[ "${FWD:-1}" = 1 ] && step test_forward "$B/tests/gpu/test_forward"
# One step per backward template: together they take more than one 600 s call (session 21).
[ -x "$B/tests/gpu/test_backward" ] && [ "${BWD80:-1}" = 1 ] &&
  step test_backward_sm80 env ATTN_BWD_TEMPLATE=sm80 "$B/tests/gpu/test_backward"
[ -x "$B/tests/gpu/test_backward" ] && [ "${BWD90:-1}" = 1 ] &&
  step test_backward_sm90 env ATTN_BWD_TEMPLATE=sm90 "$B/tests/gpu/test_backward"
# The persistent backward with 3 CTAs: every CTA takes several work items
# (CTAS3=0 skips it).
[ -x "$B/tests/gpu/test_backward" ] && [ "${CTAS3:-1}" = 1 ] &&
  step test_backward_ctas3 env ATTN_PERSISTENT_CTAS=3 "$B/tests/gpu/test_backward"
if [ "${REST:-1}" = 1 ]; then # REST=0: none of the test binaries below
# The launch plan's promises: caller workspaces, CUDA graph capture, empty sequences.
[ -x "$B/tests/gpu/test_plan" ] && step test_plan "$B/tests/gpu/test_plan"
# FP8: fwd_sm90 (FP8 P V where P is rounded), its f16_pv variant, fwd_sm80.
if [ -x "$B/tests/gpu/test_fp8" ]; then
  step test_fp8 "$B/tests/gpu/test_fp8"
  step test_fp8_f16pv "$B/tests/gpu/test_fp8" - 5
  step test_fp8_sm80 "$B/tests/gpu/test_fp8" sm_90
fi
[ -x "$B/tests/gpu/test_head_dims" ] && step test_head_dims "$B/tests/gpu/test_head_dims"
# Ring attention with its ranks simulated on this GPU, then one rank over NCCL (PyTorch's wheel).
[ -x "$B/tests/gpu/test_ring" ] && step test_ring env ATTN_NCCL="$NCCL_LIB" "$B/tests/gpu/test_ring"
fi
fi
# compute-sanitizer over every kernel template and mode at small shapes
# (tools/sanitize_device.sh; SANITIZE=0 skips it).
[ "${SANITIZE:-1}" = 1 ] && [ -x "$B/tests/gpu/sanitize_cases" ] &&
  step sanitize env L="$L/sanitize" bash tools/sanitize_device.sh "$B"
if [ "${TESTS:-1}" = 1 ] && [ "${REST:-1}" = 1 ]; then
  [ -x "$B/tests/gpu/template_sm80_test" ] && step template_sm80 "$B/tests/gpu/template_sm80_test"
  [ -x "$B/tests/gpu/template_bwd_test" ] && step template_bwd "$B/tests/gpu/template_bwd_test"
fi
if [ "${HOST:-1}" = 1 ] && [ -d "$B/host" ]; then
  step host_jit "$B/host/jit/jit_example"
  step host_aot "$B/host/aot/aot_example"
  step host_aot_no_nvrtc env ATTN_NVRTC=/nonexistent "$B/host/aot/aot_example"
  [ -x "$B/host/aot_ptx/aot_example" ] && step host_aot_ptx "$B/host/aot_ptx/aot_example"
  step host_cmake "$B/host/cmake/build/cmake_example"
  [ -x "$B/host/ring/ring_example" ] &&
    step host_ring env ATTN_NCCL="$NCCL_LIB" "$B/host/ring/ring_example" --check --seq 2048 --heads 4 --kv-heads 2
  step dlpack python3 examples/host/dlpack/attn_torch.py "$B/install/lib/libattn.so.0"
fi
# The Python package's tests (python/tests): pytest from wheels carried in
# $B/pywheels (`pip download pytest -d build/pywheels` on the dev machine)
# when the device machine has none (PYTEST=0 skips).
if [ "${PYTEST:-1}" = 1 ]; then
  python3 -c "import pytest" 2>/dev/null ||
    { [ -d "$B/pywheels" ] && pip install -q --no-index "$B"/pywheels/*.whl >/dev/null 2>&1; }
  step pytest env ATTN_LIBRARY="$PWD/$B/libattn.so" python3 -m pytest -q -rs python/tests
fi
# BENCH_STEPS="grid backward fp8 ..." runs only the named benchmarks (default: all of them).
bench() { # bench NAME ARGS...: the step bench_NAME, if BENCH_STEPS names it
  local name=$1; shift
  case " ${BENCH_STEPS:-all} " in *" all "* | *" $name "*) step "bench_$name" "$@" ;; esac
}
if [ "${BENCH:-1}" = 1 ]; then
  [ -n "${ATTN_FA4:-}" ] && bench fa4_selftest timeout 150 python3 bench/fa4_peer.py "$ATTN_FA4"
  bench python_overhead python3 bench/python_overhead.py --lib "$B/libattn.so" --out "$L"
  bench warm_load python3 bench/warm_load.py --lib "$B/libattn.so" --out "$L"
  bench grid python3 bench/bench.py --lib "$B/libattn.so" --out "$L"
  [ "${WG3:-0}" = 1 ] && bench grid_wg3 env ATTN_SM90_VARIANT=wg3 python3 bench/bench.py --lib "$B/libattn.so" \
    --dims 64 --out "$L/wg3"
  [ "${SM80:-1}" = 1 ] && bench grid_sm80 python3 bench/bench.py --lib "$B/libattn.so" --out "$L" --arch sm_90 --dims 128 --seqs 1024,4096,16384
  bench variants python3 bench/bench.py --lib "$B/libattn.so" --out "$L" --variants
  bench backward python3 bench/bench.py --lib "$B/libattn.so" --out "$L" --backward
  bench softcap python3 bench/exp2_fma.py --lib "$B/libattn.so" --out "$L" --settings none
  bench fp8 python3 bench/fp8.py --lib "$B/libattn.so" --out "$L"
  [ "${WG3:-0}" = 1 ] && bench fp8_wg3 env ATTN_SM90_VARIANT=wg3 python3 bench/fp8.py --lib "$B/libattn.so" \
    --dims 64,128 --out "$L/wg3"
  bench fp8_backward python3 bench/fp8_backward.py --lib "$B/libattn.so" --out "$L"
  bench fp8_kv python3 bench/fp8_kv.py --lib "$B/libattn.so" --out "$L"
  bench varlen python3 bench/varlen.py --lib "$B/libattn.so" --out "$L" --tables equal,masks,backward
  bench paged_prefill python3 bench/paged_prefill.py --lib "$B/libattn.so" --out "$L"
  bench decode_paged python3 bench/decode.py --paged --quick --lib "$B/libattn.so" --out "$L"
fi
cat "$L/gpu.txt"
printf '%s\n' "${summary[@]}"
save
