#!/usr/bin/env bash
# device_ring.sh [BUILD]: issue 20's multi-GPU runs, in one call on a machine with several GPUs
# (the device tool's nvidia-h200-x2 or -x4 kinds). BUILD as for device_check.sh (`make all
# test-install`, so BUILD/host/ring/ring_example and BUILD/libattn.so exist). Logs into $OUT
# (or /tmp/attnc-ring): the scaling of libattn's ring over NCCL (examples/host/ring) at S 128k
# on 1, 2 and (where there are) 4 GPUs, a --check run against a CPU attention, and the
# torch.distributed example with both engines (Python ring, libattn's ring). NVLink multicast
# stays off. Prints a summary last.
set -u
B=${1:-build}
L=${OUT:-/tmp/attnc-ring}
mkdir -p "$L"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 ATTN_CACHE_DIR=${ATTN_CACHE_DIR:-/tmp/attnc-ring-cache}
export ATTN_NCCL=${ATTN_NCCL:-$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)}
export LD_LIBRARY_PATH=$PWD/$B/install/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
GPUS=$(nvidia-smi --list-gpus | wc -l)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$L/gpu.txt" 2>&1
summary=()
run() { # run NAME SECONDS COMMAND...: its log, its last line in the summary
  local name=$1 secs=$2; shift 2
  timeout "$secs" "$@" >"$L/$name.log" 2>&1
  summary+=("$name (rc $?): $(grep -v '^\s*$' "$L/$name.log" | tail -2 | head -1)")
}
EX=$B/host/ring/ring_example
run check_2gpu 120 "$EX" --gpus 2 --check --seq 4096 --heads 4 --kv-heads 2
run check_2gpu_full 120 "$EX" --gpus 2 --check --seq 4096 --heads 4 --kv-heads 2 --full
for g in 1 2 4; do
  [ "$g" -le "$GPUS" ] || continue
  run causal_128k_${g}gpu 240 "$EX" --gpus "$g" --seq 131072 --heads 16 --kv-heads 16
  run gqa_128k_${g}gpu 240 "$EX" --gpus "$g" --seq 131072 --heads 16 --kv-heads 4
  run full_128k_${g}gpu 240 "$EX" --gpus "$g" --seq 131072 --heads 16 --kv-heads 16 --full
done
for engine in python c; do
  run torchrun_${engine} 240 env ATTN_LIBRARY="$PWD/$B/libattn.so" PYTHONPATH="$PWD/python" \
    torchrun --nproc-per-node 2 examples/python/ring_attention.py --check --seq 8192 --engine "$engine"
done
cat "$L/gpu.txt"
printf '%s\n' "${summary[@]}" | tee "$L/summary.txt"
