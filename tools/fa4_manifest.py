#!/usr/bin/env python3
"""fa4_manifest.py: compile FlashAttention-4's Hopper kernels for the configs bench/fa4_peer.py
serves, on a machine without a GPU, and write the manifest that tells fa4_peer which kernel each
call of a config runs.

    tools/prep_fa4.sh runs it in its build venv (flash-attn-4, the CuTe DSL, torch) as

    FLASH_ATTENTION_ARCH=sm_90 CUTE_DSL_ARCH=sm_90a FLASH_ATTENTION_NUM_SMS=132 \\
    FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=CACHE \\
        python tools/fa4_manifest.py MANIFEST.json

Configs: bf16, MHA, D in {64, 128, 256}, causal or not, named "64", "64c", ... as fa4_peer's
_cfg() names them. For each, FA4's own entry points run under FakeTensorMode (no GPU, no memory)
on B 4, S 4096, H 2048 / D, the anchors' shape: the training forward (an input requires grad, so
the kernel writes the LSE), the backward (preprocess, main kernel, dQ postprocess), and the
inference forward (no input requires grad, no LSE). FA4 compiles each kernel it does not have yet
and, with its persistent cache on, exports it as CACHE/<fingerprint>/<part>/<sha256>.o. The
kernels picked do not depend on B or H, nor on S from 256 up (recorded for S 256 to 16384 and
several B and H: the same cache entries); shorter sequences pick other variants, which is why
fa4_peer refuses S < 256.

How the calls are seen: each entry point looks its kernel up in a compile cache object
(`fn.compile_cache`) and then calls what it got with the launch arguments. A view of that cache
is put in its place that leaves lookups, compiles and exports to FA4's cache but returns, instead
of the kernel, a recorder that notes which cache entry was asked for and how many arguments the
call passed. FA4 skips the kernel calls under FakeTensorMode; it is told it is not in fake mode so
that it takes the calling path, and the recorders make that path launch nothing. The backward's
tile size (m_block) and head-dim rounding (hdim_multiple_of), which size fa4_peer's dq_accum,
dpsum and lse_log2 buffers, are read from the arguments of the preprocess call.

The manifest (prep_fa4.sh writes it to kernels/manifest.json as it is):
    fingerprint  FA4's source fingerprint (the cache directory's name)
    python       the Python minor version (part of the fingerprint, not of the kernels)
    versions     flash_attn_4, nvidia_cutlass_dsl, apache_tvm_ffi, arch, num_sms
    configs      {cfg: {m_block, hdim_multiple_of,
                        fwd_train | fwd_infer | bwd_pre | bwd | bwd_post:
                            {fa4_cache_entry: "<part>/<sha256>.o", nargs, so: "<part>_<sha16>.so"}}}
prep_fa4.sh links each entry into its .so; fa4_peer loads the .so and calls its "func" with nargs
arguments.
"""
import importlib.metadata as md
import inspect
import json
import os
import sys

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flash_attn.cute.interface as fai
from flash_attn.cute.cache_utils import JITPersistentCache, _compute_source_fingerprint

DIMS = (64, 128, 256)
B, S, HD = 4, 4096, 2048          # H = HD // D: the anchors' shape
TRAIN = ("fwd", "bwd_pre", "bwd", "bwd_post")   # the calls a training step makes, in order
CALLS = []                        # what the recorders saw during one config's run
BWD_TILE = {}                     # m_block, hdim_multiple_of of the last preprocess call


class Recorder:
    """Stands in for a compiled kernel: notes the call instead of launching anything."""

    def __init__(self, cache, key):
        self.cache, self.key = cache, key

    def __call__(self, *args):
        h = self.cache._key_to_hash(self.key)
        part = self.cache.cache_path.name
        # the export happened when FA4 compiled the kernel: a missing file means the cache is off
        # or the export failed, and the bundle would lack this kernel
        obj = self.cache.cache_path / f"{h}.o"
        if not obj.is_file():
            sys.exit(f"fa4_manifest: {obj} was not exported (is FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1?)")
        CALLS.append(dict(part=part, fa4_cache_entry=f"{part}/{h}.o", nargs=len(args),
                          so=f"{part}_{h[:16]}.so"))


class CacheView:
    """FA4's compile cache for one entry point, with the lookup returning a Recorder."""

    def __init__(self, cache):
        if not isinstance(cache, JITPersistentCache):
            sys.exit("fa4_manifest: FA4's persistent cache is off (set FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1)")
        self.cache = cache

    def __contains__(self, key):
        return key in self.cache

    def __setitem__(self, key, fn):
        self.cache[key] = fn          # FA4's cache exports the new kernel to disk here

    def __getitem__(self, key):
        self.cache[key]               # raises if FA4 asks for a kernel it never compiled
        return Recorder(self.cache, key)


def install_recorders():
    for fn in (fai._flash_attn_fwd, fai._bwd_preprocess, fai._flash_attn_bwd, fai._bwd_postprocess_convert):
        fn.compile_cache = CacheView(fn.compile_cache)
    # The backward calls the preprocess through the module's global name: a wrapper there sees its
    # arguments. The preprocess finds its cache through the same name, so the wrapper carries it.
    pre = fai._bwd_preprocess
    sig = inspect.signature(pre)

    def preprocess(*args, **kwargs):
        a = sig.bind(*args, **kwargs)
        a.apply_defaults()
        BWD_TILE.update(m_block=a.arguments["m_block_size"], hdim_multiple_of=a.arguments["hdim_multiple_of"])
        return pre(*args, **kwargs)

    preprocess.compile_cache = pre.compile_cache
    fai._bwd_preprocess = preprocess
    # under FakeTensorMode FA4 would skip the kernel calls that the recorders are there to see
    fai.is_fake_mode = lambda: False


def run_config(D, causal, train):
    """Run one FA4 step under FakeTensorMode; returns the recorded calls."""
    CALLS.clear()
    BWD_TILE.clear()
    with FakeTensorMode():
        q, k, v = (torch.empty(B, S, HD // D, D, device="cuda", dtype=torch.bfloat16, requires_grad=train)
                   for _ in range(3))
        out, lse, *_ = fai._flash_attn_fwd(q, k, v, causal=causal, return_lse=False)
        if train:
            fai._flash_attn_bwd(q.detach(), k.detach(), v.detach(), out.detach(), torch.empty_like(out),
                                lse, None, causal)
    want = TRAIN if train else ("fwd",)
    got = tuple(c["part"] for c in CALLS)
    if got != want:
        # another FA4 version or config takes another path (split kernels, a dsink reduce, ...),
        # which fa4_peer's argument lists do not cover
        sys.exit(f"fa4_manifest: D {D} causal {causal} train {train}: calls {got}, expected {want}")
    return [{k: v for k, v in c.items() if k != "part"} for c in CALLS]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fa4_manifest.py MANIFEST.json  (tools/prep_fa4.sh sets the environment)")
    for var in ("FLASH_ATTENTION_ARCH", "CUTE_DSL_ARCH", "FLASH_ATTENTION_NUM_SMS"):
        if not os.environ.get(var):
            sys.exit(f"fa4_manifest: {var} unset: without a GPU FA4 cannot tell what to compile for")
    install_recorders()
    man = dict(fingerprint=_compute_source_fingerprint(),
               python=f"{sys.version_info.major}.{sys.version_info.minor}",
               versions=dict(flash_attn_4=md.version("flash-attn-4"),
                             nvidia_cutlass_dsl=md.version("nvidia-cutlass-dsl"),
                             apache_tvm_ffi=md.version("apache-tvm-ffi"),
                             arch=os.environ["CUTE_DSL_ARCH"],
                             num_sms=int(os.environ["FLASH_ATTENTION_NUM_SMS"])),
               configs={})
    for D in DIMS:
        for causal in (False, True):
            fwd_train, bwd_pre, bwd, bwd_post = run_config(D, causal, train=True)
            tile = dict(BWD_TILE)
            (fwd_infer,) = run_config(D, causal, train=False)
            cfg = f"{D}{'c' if causal else ''}"
            man["configs"][cfg] = dict(tile, fwd_train=fwd_train, fwd_infer=fwd_infer, bwd_pre=bwd_pre,
                                       bwd=bwd, bwd_post=bwd_post)
            ids = " ".join(f"{p} {e['so'][-20:-3]}" for p, e in man["configs"][cfg].items() if isinstance(e, dict))
            print(f"fa4_manifest: {cfg:4s} m_block {tile['m_block']} hdim_multiple_of {tile['hdim_multiple_of']}: {ids}",
                  flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
