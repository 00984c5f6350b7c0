#!/usr/bin/env bash
# prep_fa4.sh: compile FlashAttention-4's Hopper kernels ahead of time on a machine without a GPU
# and pack them, with the two libraries they load at run time, into the .fa4 bundle that the GPU
# machine (H100/H200, Python 3.12, torch 2.11 + CUDA 13, no network, 40 MiB for what a run
# carries) unpacks; bench/fa4_peer.py loads the kernels from it without FA4 or its compiler.
#
#   tools/prep_fa4.sh            -> .fa4/site.tar.xz (14.2 MB), .fa4/kernels.tar.xz and
#                                   .fa4/fa4cache.tar.xz (0.13 MB each)
#
# What it does:
#   1. pip download (no deps, binary only) the exact wheels FA4 compiles with, for cp312 /
#      manylinux x86_64: flash-attn-4, nvidia-cutlass-dsl with its libs-base, libs-core and
#      libs-cu13 (the CUDA 13 build, as torch 2.11's PyPI wheels are; nvidia-cutlass-dsl itself
#      asks for libs-cu12, hence no deps), quack-kernels, apache-tvm-ffi, torch-c-dlpack-ext.
#   2. two venvs on pyenv's Python 3.12 (FA4's cache fingerprint holds the Python minor version,
#      and the bundle's tvm_ffi core module is cp312): $FA4_WORK/torch, torch 2.11.0 from PyPI and
#      nothing else, which stands in for the device in the last check; and $FA4_WORK/venv, the
#      build venv: the wheels above, einops and protobuf (FA4's and the CuTe DSL's imports that
#      torch does not bring), and a .pth line that imports torch from the first venv (one 4.6 GB
#      torch install instead of two).
#   3. runs tools/fa4_manifest.py under FakeTensorMode with FA4's persistent cache on and the
#      target given by hand (FLASH_ATTENTION_ARCH=sm_90, CUTE_DSL_ARCH=sm_90a,
#      FLASH_ATTENTION_NUM_SMS=132: H100 SXM and H200 both have 132 SMs): FA4 compiles the
#      kernels of bf16 MHA, D 64/128/256, causal or not (training and inference forward, the
#      backward's preprocess, main kernel and dQ postprocess: 26 distinct) and exports each as
#      <cache>/<fingerprint>/<part>/<sha256>.o; the manifest names, per config and call, the
#      entry, its argument count and the backward's tile sizes.
#   4. links each object into kernels/<part>_<sha16>.so (tvm_ffi.load_module wants a shared
#      library; FA4 loads its .o files through the CuTe DSL, which the bundle leaves out), and
#      checks that they need neither libtorch nor libpython.
#   5. site/: tvm_ffi 0.1.15.post2 from its cp312 wheel without its C++ headers and sources,
#      3rdparty, Cython, stub and CMake files (only the Python package and libtvm_ffi.so load),
#      and the CuTe DSL runtime (libs-cu13's libcute_dsl_runtime.so) as site/fa4rt/: the kernels
#      resolve their _cuda*/CuteDSLRT_* symbols from it. The rest of the CuTe DSL (its MLIR
#      extension alone is 193 MB, 47.5 MB as .tar.xz) is not needed to run compiled kernels.
#   6. packs site.tar.xz, kernels.tar.xz and fa4cache.tar.xz (FA4's own cache of the same
#      kernels, for a process that has a full FA4 install) into $FA4_OUT, checks that they
#      total under 40 MiB, unpacks them into scratch and checks, with the torch venv (torch and
#      nothing else on the path), that fa4_peer.setup() takes tvm_ffi from the bundle and that
#      fa4_peer loads every kernel the manifest names (loading needs no GPU).
#
# On the device:  mkdir -p /tmp/fa4 && for f in .fa4/*.tar.xz; do tar xJf "$f" -C /tmp/fa4; done
#                 python3 bench/fa4_peer.py /tmp/fa4      (carry .fa4 in the run)
#
# Environment: FA4_OUT (the bundle's directory, default .fa4), FA4_WORK (scratch, default
# /tmp/attnc-fa4; a rerun reuses its wheels and venvs), FA4_PY312 (default pyenv's 3.12.1),
# FA4_VERSION, CUTLASS_DSL_VERSION, QUACK_VERSION, TVM_FFI_VERSION, DLPACK_EXT_VERSION,
# TORCH_VERSION. Takes ~2 min on 2 cores with the downloads and venvs in place (compile 40 s,
# xz ~1 min, one thread each); the first run adds torch's 2.6 GB of wheels (with its CUDA
# libraries) and the two venvs: ~3.5 min here.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FA4_VERSION=${FA4_VERSION:-4.0.0b36}
CUTLASS_DSL_VERSION=${CUTLASS_DSL_VERSION:-4.8.1}
QUACK_VERSION=${QUACK_VERSION:-0.6.5}
TVM_FFI_VERSION=${TVM_FFI_VERSION:-0.1.15.post2}
DLPACK_EXT_VERSION=${DLPACK_EXT_VERSION:-0.1.5}
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
WORK=${FA4_WORK:-/tmp/attnc-fa4}
PY=${FA4_PY312:-/root/.pyenv/versions/3.12.1/bin/python3}
DEST=${FA4_OUT:-$ROOT/.fa4}
LIMIT=$((40 * 1024 * 1024))  # what a device run may carry

say() { printf 'prep_fa4: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ -x "$PY" ] || die "no Python at $PY (set FA4_PY312 to a python3.12)"
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' \
  || die "$PY is not Python 3.12 (the device's; FA4's cache and tvm_ffi's core module are per version)"
for t in gcc readelf nm xz tar unzip; do command -v $t >/dev/null || die "missing $t"; done
mkdir -p "$WORK" "$DEST"
DEST=$(cd "$DEST" && pwd)
if [ "$DEST" = "$ROOT/.fa4" ] && ! grep -qxE '/?\.fa4/' "$ROOT/.git/info/exclude" 2>/dev/null; then
  echo '/.fa4/' >>"$ROOT/.git/info/exclude"
fi
T0=$(date +%s)

# 1. FA4's wheels (pip download skips the files already in the directory)
say "downloading flash-attn-4 $FA4_VERSION, nvidia-cutlass-dsl $CUTLASS_DSL_VERSION (cu13), quack-kernels" \
    "$QUACK_VERSION, apache-tvm-ffi $TVM_FFI_VERSION, torch-c-dlpack-ext $DLPACK_EXT_VERSION"
WHL=$WORK/whl
mkdir -p "$WHL"
SPECS=("flash-attn-4==$FA4_VERSION" "nvidia-cutlass-dsl==$CUTLASS_DSL_VERSION"
       "nvidia-cutlass-dsl-libs-base==$CUTLASS_DSL_VERSION" "nvidia-cutlass-dsl-libs-core==$CUTLASS_DSL_VERSION"
       "nvidia-cutlass-dsl-libs-cu13==$CUTLASS_DSL_VERSION" "quack-kernels==$QUACK_VERSION"
       "apache-tvm-ffi==$TVM_FFI_VERSION" "torch-c-dlpack-ext==$DLPACK_EXT_VERSION")
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$WHL" "${SPECS[@]}"
FFI_WHL=$(ls "$WHL"/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl)
CU13_WHL=$(ls "$WHL"/nvidia_cutlass_dsl_libs_cu13-"$CUTLASS_DSL_VERSION"-cp312-*.whl)

# 2a. torch alone: the device's stand-in. Its wheels are kept in $WORK/torchwhl, so a venv
# removed by hand is rebuilt without downloading again.
TVENV=$WORK/torch
TPY=$TVENV/bin/python
have_torch="import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')"
if ! "$TPY" -c "$have_torch" 2>/dev/null; then
  say "downloading torch $TORCH_VERSION and its CUDA libraries from PyPI into $WORK/torchwhl"
  mkdir -p "$WORK/torchwhl"
  "$PY" -m pip download -q --only-binary=:all: -d "$WORK/torchwhl" "torch==$TORCH_VERSION"
  say "creating the torch venv $TVENV"
  rm -rf "$TVENV"
  "$PY" -m venv "$TVENV"
  "$TPY" -m pip install -q --no-index --find-links "$WORK/torchwhl" "torch==$TORCH_VERSION"
fi

# 2b. the build venv: FA4's wheels exactly (no deps: see 1), torch through the .pth
VENV=$WORK/venv
VPY=$VENV/bin/python
[ -x "$VPY" ] || { say "creating the build venv $VENV"; "$PY" -m venv "$VENV"; }
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$TPY" >"$(purelib "$VPY")/attnc-torch.pth"
have="import sys, importlib.metadata as m, einops, google.protobuf
sys.exit(any(m.version(n) != v for n, v in (s.split('==') for s in sys.argv[1:])))"
if ! "$VPY" -c "$have" "${SPECS[@]}" 2>/dev/null; then
  say "installing FA4's wheels, einops and protobuf into the build venv"
  "$VPY" -m pip install -q einops protobuf
  "$VPY" -m pip install -q --no-warn-conflicts --no-deps --no-index --find-links "$WHL" "${SPECS[@]}"
fi

# 3. compile. A fresh cache each time: the bundle carries exactly the kernels this run names.
# FA_LOG_LEVEL is part of FA4's compile keys: the device runs without it.
STAGE=$WORK/stage
rm -rf "$STAGE"; mkdir -p "$STAGE/kernels" "$STAGE/site/fa4rt"
CACHE=$STAGE/fa4cache
say "compiling the sm_90a kernels (~1 min)"
t=$(date +%s)
(unset FA_LOG_LEVEL
 export FLASH_ATTENTION_ARCH=sm_90 CUTE_DSL_ARCH=sm_90a FLASH_ATTENTION_NUM_SMS=132 \
        FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$CACHE
 # stderr is torch's and the CuTe DSL's warnings about fake tensors and the arguments the DSL
 # passes through untouched, harmless: kept in a log, shown on a failure
 "$VPY" "$ROOT/tools/fa4_manifest.py" "$STAGE/kernels/manifest.json" 2>"$WORK/compile.log") \
  || { tail -20 "$WORK/compile.log" >&2; die "fa4_manifest.py failed (log: $WORK/compile.log)"; }
say "compiled in $(($(date +%s) - t)) s"
find "$CACHE" -name '*.lock' -delete   # FA4's per-entry file locks, empty
FP=$("$VPY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["fingerprint"])' "$STAGE/kernels/manifest.json")
[ "$(ls "$CACHE")" = "$FP" ] || die "FA4's cache holds $(ls "$CACHE" | tr '\n' ' ')besides fingerprint $FP"

# 4. one .so per distinct cache entry
"$VPY" - "$STAGE/kernels/manifest.json" <<'EOF' >"$WORK/entries.txt"
import json, sys
man = json.load(open(sys.argv[1]))
ents = {(e["fa4_cache_entry"], e["so"]) for c in man["configs"].values() for e in c.values() if isinstance(e, dict)}
print("".join(f"{o} {so}\n" for o, so in sorted(ents)), end="")
EOF
while read -r obj so; do
  gcc -shared -o "$STAGE/kernels/$so" "$CACHE/$FP/$obj"
  needed=$(readelf -d "$STAGE/kernels/$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  if echo "$needed" | grep -qE 'torch|c10|python'; then die "$so needs $needed"; fi
  if nm -D --undefined-only "$STAGE/kernels/$so" | awk '{print $NF}' | grep -qE '^(_?Py|_ZN(2at|3c10|5torch))'; then
    die "$so has undefined Python/torch symbols"
  fi
done <"$WORK/entries.txt"
n_so=$(wc -l <"$WORK/entries.txt")
n_obj=$(find "$CACHE" -name '*.o' | wc -l)
[ "$n_so" = "$n_obj" ] || die "FA4 exported $n_obj kernels, the manifest names $n_so"
say "linked $n_so kernels; none needs libtorch or libpython"

# 5. site/: tvm_ffi's Python package and library, the CuTe DSL runtime
(cd "$STAGE/site" && unzip -q "$FFI_WHL" && rm -rf tvm_ffi/3rdparty tvm_ffi/include tvm_ffi/src \
  tvm_ffi/cython tvm_ffi/stub tvm_ffi/share tvm_ffi/CMakeLists.txt)
unzip -q -j -d "$STAGE/site/fa4rt" "$CU13_WHL" nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so

# 6a. pack. One xz thread: this machine's cores are shared. The x86 filter (branch addresses
# made absolute) and a dictionary the size of the runtime library take site.tar.xz from
# 14.9 MB (plain -9e) to 14.2 MB.
for part in site kernels fa4cache; do
  rm -f "$DEST/$part.tar.xz"
  tar -C "$STAGE" --exclude=__pycache__ --sort=name --owner=0 --group=0 --numeric-owner -cf - "$part" \
    | xz -T1 -9e --x86 --lzma2=preset=9e,dict=64MiB >"$DEST/$part.tar.xz"
done
total=0
for part in site kernels fa4cache; do
  s=$(stat -c %s "$DEST/$part.tar.xz"); total=$((total + s))
  say "$DEST/$part.tar.xz: $s bytes"
done
[ "$total" -lt "$LIMIT" ] || die "the bundle is $total bytes, over 40 MiB"
say "total $total bytes ($((total * 100 / LIMIT))% of 40 MiB)"

# 6b. the unpacked bundle with torch and nothing else: fa4_peer's tvm_ffi is the bundle's, and
# every kernel loads (tvm_ffi resolves its symbols against the runtime setup() loaded)
CHECK=$WORK/check
rm -rf "$CHECK"; mkdir -p "$CHECK"
for f in "$DEST"/site.tar.xz "$DEST"/kernels.tar.xz "$DEST"/fa4cache.tar.xz; do tar xJf "$f" -C "$CHECK"; done
say "checking the unpacked bundle with $TVENV (torch only)"
PYTHONPATH=$ROOT/bench "$TPY" - "$CHECK" <<'EOF'
import importlib.util, os, sys, warnings
warnings.filterwarnings("ignore", "Failed to initialize NumPy")  # the device has numpy; not needed here
import torch
import fa4_peer
d = sys.argv[1]
for mod in ("flash_attn", "cutlass", "quack", "tvm_ffi"):  # nothing of FA4's before setup()
    assert importlib.util.find_spec(mod) is None, f"{mod} importable without the bundle"
fa4_peer.setup(d)
import tvm_ffi
assert tvm_ffi.__file__.startswith(os.path.join(d, "site") + os.sep), tvm_ffi.__file__
man = fa4_peer._ST["manifest"]
for cfg, ent in man["configs"].items():
    for part in ("fwd_train", "fwd_infer", "bwd_pre", "bwd", "bwd_post"):
        fa4_peer._fn(cfg, part)
print(f"prep_fa4: Python {sys.version.split()[0]}, torch {torch.__version__}: fa4_peer loads "
      f"{len(fa4_peer._FNS)} kernel calls of {len(man['configs'])} configs "
      f"({' '.join(man['configs'])}) through the bundle's tvm_ffi {tvm_ffi.__version__}; "
      f"{man['versions']}", flush=True)
EOF
say "done in $(($(date +%s) - T0)) s: $DEST/{site,kernels,fa4cache}.tar.xz"
