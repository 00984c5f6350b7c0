#!/usr/bin/env bash
# deps.sh: makes sure what attnc builds and tests with is here. Installs the
# Debian packages it can (as root, or through sudo); names what it cannot.
# The CUDA toolkit is not a Debian package here: it is named, never fetched.
set -u
CUDA=${CUDA:-/usr/local/cuda}
missing_pkgs=()
need() { # need COMMAND-OR-FILE PACKAGE
  case "$1" in
    /*) [ -e "$1" ] || missing_pkgs+=("$2") ;;
    *) command -v "$1" >/dev/null 2>&1 || missing_pkgs+=("$2") ;;
  esac
}
need cc gcc
need make make
need g++ g++                                # tests/host: emitted hooks built for the host
need flex flex
need bison bison
need /usr/include/criterion/criterion.h libcriterion-dev
need clang clang
need /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a libclang-rt-14-dev
need cmake cmake                            # the CMake host example
need pkg-config pkg-config                  # host examples find libattn with it
need /usr/include/dlpack/dlpack.h libdlpack-dev # attn_call_bind_dlpack
if [ ${#missing_pkgs[@]} -gt 0 ]; then
  echo "deps: installing ${missing_pkgs[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1 &&
     $SUDO apt-get update -qq &&
     DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_pkgs[@]}" >/dev/null; then
    echo "deps: installed ${missing_pkgs[*]}"
  else
    echo "deps: missing Debian packages: ${missing_pkgs[*]}" >&2
    echo "deps: install them with: sudo apt-get install ${missing_pkgs[*]}" >&2
    exit 1
  fi
fi
if [ ! -e "$CUDA/include/nvrtc.h" ] || [ ! -e "$CUDA/lib64/libnvrtc.so" ]; then
  echo "deps: the CUDA toolkit (with NVRTC) is not at $CUDA." >&2
  echo "deps: install NVIDIA's CUDA toolkit 12.x or 13.x, or run: make CUDA=/path/to/cuda" >&2
  exit 1
fi
exit 0
