#!/usr/bin/env bash
# prep_flashinfer.sh: build FlashInfer's attention kernels ahead of time on a machine without a GPU
# and pack them, with FlashInfer's Python part and tvm-ffi, into one small archive that the GPU
# machine (H200, Python 3.12, torch 2.11, no network, no time to compile) unpacks and imports with
# JIT compilation switched off. bench/flashinfer_peer.py is what uses it.
#
#   tools/prep_flashinfer.sh            -> .fi/site_fi.tar.xz (12.2 MB), .fi/modules.txt
#
# What it does:
#   1. pip download (no deps, binary only) the wheels for cp312 / manylinux x86_64:
#      flashinfer-python (pure Python) and apache-tvm-ffi (FlashInfer's FFI: the compiled modules
#      resolve their TVMFFI* symbols from its libtvm_ffi.so). torch itself is not carried (the
#      device has torch 2.11, which exports the DLPack exchange API tvm-ffi looks for, so
#      torch-c-dlpack-ext is not needed either); the other run-time imports (numpy, einops, jinja2,
#      filelock, pynvml, cuda-bindings, ...) are in the device's image.
#   2. a build venv on this machine's Python ($PYTHON, default python3; it must import torch, any
#      version: torch only supplies the _GLIBCXX_USE_CXX11_ABI flag) with the same FlashInfer and
#      tvm-ffi versions, and nvcc ($CUDA_HOME, default /usr/local/cuda).
#   3. builds, with FLASHINFER_CUDA_ARCH_LIST=9.0a, the three modules the paged wrappers load for
#      bf16 q/kv/o, int32 indices, head dim 128, no RoPE / sliding window / soft cap:
#        - batch decode (BatchDecodeWithPagedKVCacheWrapper, use_tensor_cores=False)
#        - the fa2 'primary' batch prefill module (name ends _kv_stride_equal; what
#          BatchPrefillWithPagedKVCacheWrapper(backend="fa2") and the tensor-core decode load when
#          k_cache and v_cache have equal strides)
#        - the fa3 (sm90) batch prefill module (name ends _sm90)
#      then the same two decode paths for an e4m3 cache under a bf16 q (bench/decode.py --fp8):
#      batch decode, and the fa2 primary module the tensor-core decode loads (FP8 modules that fail
#      to build are left out, said, and not checked),
#      and puts each at flashinfer/data/aot/<name>/<name>.so, where FlashInfer looks first.
#   4. checks that the modules link against neither libtorch nor libpython (so a build on another
#      Python / torch than the device's is fine), strips the CUDA sources, CUTLASS, CCCL and spdlog
#      trees (only the top-level data/csrc files stay: FlashInfer renders those templates before it
#      looks a module up), checks that the stripped tree imports with FLASHINFER_DISABLE_JIT=1 and
#      that FlashInfer's own lookups find the three modules by name, and packs .fi/site_fi.tar.xz.
#
# On the device:  mkdir -p $SITE && tar xJf .fi/site_fi.tar.xz -C $SITE
#                 PYTHONPATH=$SITE FLASHINFER_DISABLE_JIT=1 python3 ...   (carry .fi in the run)
#
# Environment: PYTHON, CUDA_HOME, FI_WORK (scratch, default /tmp/attnc-fi), MAX_JOBS (ninja jobs),
# FI_VERSION, TVM_FFI_VERSION, FI_PY312 (a python3.12 for the last check; default: pyenv's).
# Takes ~15 min on 2 cores (fa3 10 min, fa2 3 min, decode 30 s); a rerun reuses ninja's objects.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FI_VERSION=${FI_VERSION:-0.7.2.post1}
TVM_FFI_VERSION=${TVM_FFI_VERSION:-0.1.15.post2}
WORK=${FI_WORK:-/tmp/attnc-fi}
PY=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
DEST=$ROOT/.fi
export MAX_JOBS=${MAX_JOBS:-$(nproc)}

say() { printf 'prep_flashinfer: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ -x "$CUDA_HOME/bin/nvcc" ] || die "no nvcc at $CUDA_HOME/bin/nvcc (set CUDA_HOME)"
"$PY" -c "import torch" 2>/dev/null || die "$PY cannot import torch (any version will do: pip install torch)"
for t in readelf nm xz tar unzip; do command -v $t >/dev/null || die "missing $t"; done
mkdir -p "$WORK" "$DEST"
grep -qx '/.fi/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.fi/' >>"$ROOT/.git/info/exclude"

# 1. wheels for the device (cp312, manylinux x86_64)
say "downloading flashinfer-python $FI_VERSION and apache-tvm-ffi $TVM_FFI_VERSION for cp312"
mkdir -p "$WORK/whl312"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$WORK/whl312" "flashinfer-python==$FI_VERSION" "apache-tvm-ffi==$TVM_FFI_VERSION"
FI_WHL=$(ls "$WORK"/whl312/flashinfer_python-"$FI_VERSION"-*.whl)
FFI_WHL=$(ls "$WORK"/whl312/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl)

# 2. build venv on this machine's Python (system site packages give it torch)
VENV=$WORK/venv
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the build venv $VENV from $PY"
  "$PY" -m venv --system-site-packages "$VENV"
fi
VPY=$VENV/bin/python
# (a venv made from a venv's Python sees the base interpreter's site packages, not that venv's:
# where torch comes from PY's own site packages, a .pth line hands them to the build venv)
if ! "$VPY" -c "import torch" 2>/dev/null; then
  "$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch_from_python.pth"
  "$VPY" -c "import torch" 2>/dev/null || die "the build venv $VENV cannot import torch"
fi
have="import flashinfer, tvm_ffi, sys; sys.exit(flashinfer.__version__ != '$FI_VERSION')"
if ! "$VPY" -c "$have" 2>/dev/null; then
  say "installing FlashInfer (no deps), tvm-ffi and the build's pure-Python needs into the venv"
  "$VPY" -m pip install -q ninja nvidia-ml-py numpy einops jinja2 filelock tqdm tabulate packaging \
      requests click
  "$VPY" -m pip install -q --no-warn-conflicts --no-deps "$FI_WHL" "apache-tvm-ffi==$TVM_FFI_VERSION"
fi
export PATH=$VENV/bin:$CUDA_HOME/bin:$PATH CUDA_HOME

# 3. build the modules
AOT=$WORK/aot
rm -rf "$AOT"; mkdir -p "$AOT"
say "building 5 modules for sm_90a with $MAX_JOBS ninja jobs (decode ~1 min each, fa2 ~3 min each, fa3 ~10 min)"
FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=$WORK/ws AOT=$AOT "$VPY" - <<'EOF'
import os, shutil, time
import torch
from flashinfer.jit.attention import gen_batch_decode_module, gen_batch_prefill_module
from flashinfer.jit.attention.modules import _gen_batch_prefill_primary_module
bf = torch.bfloat16
# (dtype_q, dtype_kv, dtype_o, dtype_idx, head_dim_qk, head_dim_vo, pos_encoding_mode NONE,
#  use_sliding_window, use_logits_soft_cap): what the wrappers' plan() passes for bf16, D 128,
# window_left -1, logits_soft_cap 0, int32 indptr; the prefill modules add use_fp16_qk_reduction.
args = (bf, bf, bf, torch.int32, 128, 128, 0, False, False)
args8 = (bf, torch.float8_e4m3fn, bf, torch.int32, 128, 128, 0, False, False)
specs = [(gen_batch_decode_module(*args), True),
         (_gen_batch_prefill_primary_module("fa2", *args, False), True),
         (gen_batch_prefill_module("fa3", *args, False), True),
         (gen_batch_decode_module(*args8), False),
         (_gen_batch_prefill_primary_module("fa2", *args8, False), False)]
built = []
for s, required in specs:
    t = time.time()
    try:
        s.build(verbose=False)
    except Exception as e:
        if required:
            raise
        print(f"prep_flashinfer: left out {s.name} (its build failed: {str(e)[-200:]})", flush=True)
        continue
    d = os.path.join(os.environ["AOT"], s.name)
    os.makedirs(d)
    shutil.copy(s.jit_library_path, os.path.join(d, s.name + ".so"))
    built.append(s.name)
    print(f"prep_flashinfer: built {s.name} in {time.time() - t:.0f} s", flush=True)
with open(os.path.join(os.environ["AOT"], "modules.txt"), "w") as f:
    f.write("".join(n + "\n" for n in built))
EOF

# 4a. the modules must not depend on torch's or Python's ABI
for so in "$AOT"/*/*.so; do
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  if echo "$needed" | grep -qE 'torch|c10|python'; then die "$(basename "$so") needs $needed"; fi
  if nm -D --undefined-only "$so" | awk '{print $NF}' | grep -qE '^(_?Py|_ZN(2at|3c10|5torch))'; then
    die "$(basename "$so") has undefined Python/torch symbols"
  fi
  glibcxx=$(nm -D --undefined-only "$so" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
  say "$(basename "$so" .so): needs $needed(newest $glibcxx); no torch/Python symbols"
done

# 4b. the device's site tree: the cp312 wheels unpacked, the build trees stripped, the modules added
SITE=$WORK/site
rm -rf "$SITE"; mkdir -p "$SITE"
(cd "$SITE" && unzip -q "$FI_WHL" && unzip -q -o "$FFI_WHL")
DATA=$SITE/flashinfer/data
rm -rf "$DATA/cutlass" "$DATA/cccl" "$DATA/include" "$DATA/spdlog"
find "$DATA/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
mkdir -p "$DATA/aot"
cp -r "$AOT"/*/ "$DATA/aot/"
cp "$AOT/modules.txt" "$DATA/aot/modules.txt"

# 4c. the stripped tree imports with JIT off and FlashInfer's own lookups load the three modules.
# No GPU here: the arch list stands in for the device's. This machine's Python cannot load the
# cp312 tvm_ffi, so the check takes the stripped flashinfer package with the venv's tvm_ffi (the
# same version); with a python3.12 at hand, FI_PY312=python3.12 also loads each module through
# the bundle's own cp312 tvm_ffi.
CHECK=$WORK/check
rm -rf "$CHECK" "$WORK/checkws"; mkdir -p "$CHECK"
ln -s "$SITE/flashinfer" "$CHECK/flashinfer"
say "checking the stripped tree (FLASHINFER_DISABLE_JIT=1)"
CUDART_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PYTHONPATH=$CHECK FLASHINFER_DISABLE_JIT=1 FLASHINFER_CUDA_ARCH_LIST=9.0a \
FLASHINFER_WORKSPACE_BASE=$WORK/checkws LD_LIBRARY_PATH=$CUDART_PATH "$VPY" - "$CHECK" <<'EOF'
import sys
import torch
import flashinfer
from flashinfer.decode import get_batch_decode_module
from flashinfer.prefill import get_batch_prefill_module
assert flashinfer.__file__.startswith(sys.argv[1]), flashinfer.__file__
bf = torch.bfloat16
args = (bf, bf, bf, torch.int32, 128, 128, 0, False, False)
args8 = (bf, torch.float8_e4m3fn, bf, torch.int32, 128, 128, 0, False, False)
get_batch_decode_module(*args)                      # CUDA-core decode
get_batch_prefill_module("fa2", *args, False)       # fa2 prefill, tensor-core decode
get_batch_prefill_module("fa3", *args, False)       # fa3 (sm90) prefill
n = 3
built = open(sys.argv[1] + "/flashinfer/data/aot/modules.txt").read().split()
for get, a in ((lambda: get_batch_decode_module(*args8), "decode"),
               (lambda: get_batch_prefill_module("fa2", *args8, False), "fa2")):
    if any("e4m3" in m and (("decode" in m) == (a == "decode")) for m in built):
        get()                                       # the e4m3 cache's modules that were built
        n += 1
print(f"prep_flashinfer: the stripped tree loads the {n} modules with JIT disabled", flush=True)
EOF
FI_PY312=${FI_PY312:-$(ls "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}
if [ -n "$FI_PY312" ]; then
  mkdir -p "$WORK/py312"  # tvm_ffi's one pure-Python need, absent from a bare python3.12
  "$PY" -m pip download -q --no-deps -d "$WORK/py312" typing_extensions
  (cd "$WORK/py312" && unzip -q -o typing_extensions-*.whl)
  PYTHONPATH=$SITE:$WORK/py312 LD_LIBRARY_PATH=$CUDART_PATH "$FI_PY312" - "$DATA/aot" <<'EOF'
import glob, sys
import tvm_ffi
for so in sorted(glob.glob(sys.argv[1] + "/*/*.so")):
    m = tvm_ffi.load_module(so)
    assert hasattr(m, "plan") and (hasattr(m, "run") or hasattr(m, "paged_run")), so
print(f"prep_flashinfer: Python {sys.version.split()[0]} loads the bundle's modules through its "
      f"tvm_ffi {tvm_ffi.__version__}", flush=True)
EOF
fi

# 4d. pack
rm -f "$DEST/site_fi.tar.xz"
tar -C "$SITE" --exclude=__pycache__ --sort=name --owner=0 --group=0 --numeric-owner -cf - . \
  | xz -T0 -9 >"$DEST/site_fi.tar.xz"
cp "$AOT/modules.txt" "$DEST/modules.txt"
say "bundle $DEST/site_fi.tar.xz: $(stat -c %s "$DEST/site_fi.tar.xz") bytes; modules:"
sed 's/^/  /' "$DEST/modules.txt" >&2
