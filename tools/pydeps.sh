#!/usr/bin/env bash
# pydeps.sh: what python/tests needs: pytest and PyTorch (the package's
# user framework; its GPU tests skip where there is no GPU). Installs them
# from PyPI with pip when they are missing; names them when it cannot.
set -u
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "pydeps: no $PY: install Python 3.9 or newer (Debian: apt-get install python3 python3-pip)" >&2
  exit 1
fi
missing=()
"$PY" -c "import pytest" 2>/dev/null || missing+=(pytest)
"$PY" -c "import torch" 2>/dev/null || missing+=("torch>=2.4")
[ ${#missing[@]} -eq 0 ] && exit 0
echo "pydeps: installing ${missing[*]} with pip (PyTorch is large: a few minutes)"
if "$PY" -m pip install -q "${missing[@]}"; then
  echo "pydeps: installed ${missing[*]}"
  exit 0
fi
echo "pydeps: could not install ${missing[*]}; run: $PY -m pip install ${missing[*]}" >&2
exit 1
