"""attnc.CRing / c_ring_attention (python/attnc/_cring.py), libattn's ring over NCCL: here, what
needs no GPU (the refusals reach Python as exceptions with libattn's messages); the one-rank run
on a GPU is in test_gpu.py."""
import os
import subprocess
import sys

import pytest

import attnc

SHARD = """
attention shard {
  input  q : bf16[B, H, Sq, 64];
  input  k : bf16[B, Hk, Skv, 64];
  input  v : bf16[B, Hk, Skv, 64];
  scalar q0 : i32 = 0;
  scalar k0 : i32 = 0;
  s = mask((q @ k^T) * 0.125, j + k0 <= i + q0);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 64];
  output lse = logsumexp(s);
  grad q, k, v;
}
"""


def test_a_bad_layout_is_refused_before_libattn(cache_dir):
    g = attnc.compile(SHARD, arch="sm_90a", cache_dir=cache_dir).shard
    with pytest.raises(ValueError, match="layout 'striped'"):
        attnc.CRing(g, 16, layout="striped")


def test_a_missing_nccl_is_named():
    # Its own process: libattn opens NCCL once per process.
    code = ("import attnc\n"
            f"g = attnc.compile({SHARD!r}, arch='sm_90a', cache_dir=None).shard\n"
            "try:\n"
            "    attnc.CRing(g, 16)\n"
            "except attnc.UnsupportedError as e:\n"
            "    print('refused:', e)\n")
    env = dict(os.environ, ATTN_NCCL="/nonexistent/libnccl.so.2",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "refused:" in out.stdout and "libnccl not found" in out.stdout, out.stdout + out.stderr
