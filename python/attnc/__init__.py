"""attnc for PyTorch: compile .attn attention graphs to fused CUDA kernels
and call them as PyTorch operators, with autograd, torch.compile and CUDA
graph capture.

    import attnc
    mod = attnc.compile('''
    attention softcap {
      input  q : bf16[B, H, S, 128];
      input  k : bf16[B, H, S, 128];
      input  v : bf16[B, H, S, 128];
      scalar scale : f32 = 1.0 / sqrt(128.0);
      s = 30.0 * tanh((q @ k^T) * scale / 30.0);
      o = softmax(mask(s, j <= i)) @ v;
      output o : bf16[B, H, S, 128];
      output lse = logsumexp(mask(s, j <= i));
      grad q, k, v;
    }''')
    o, lse = mod.softcap(q, k, v)       # or mod(q, k, v): the only graph
    o.sum().backward()

The kernels come from libattn.so (see _lib.py for where it is looked for),
whose version this package's must equal.
"""
__version__ = "0.1.0"

import hashlib
import os
import threading

from ._errors import (AttnError, BindError, LibraryError, NoDriverError, SourceError,
                      UnsupportedError)
from ._core import Call, Context, RawGraph, RawModule, ScalarSpec, TensorSpec
from ._graph import Graph
from ._lib import library, library_path
from ._merge import merge_partials
from ._ring import attnc_shard_functions, ring_attention
from ._cring import CRing, NcclComm, c_ring_attention
from ._fp8 import hadamard, quantize_fp8

__all__ = [
    "compile", "Module", "Graph", "Context", "RawModule", "RawGraph", "Call", "TensorSpec",
    "ScalarSpec", "AttnError", "SourceError", "UnsupportedError", "BindError", "NoDriverError",
    "LibraryError", "library_version", "library_path", "merge_partials", "ring_attention",
    "attnc_shard_functions", "hadamard", "quantize_fp8", "CRing", "NcclComm", "c_ring_attention",
]


def library_version():
    """The loaded libattn's version (equal to __version__)."""
    return library().attn_version().decode()


class Module:
    """A compiled .attn source: its graphs by name (mod.name, mod["name"],
    mod.graphs), and mod(...) when it has only one."""

    def __init__(self, raw, digest):
        self.raw = raw
        self.arch = raw.arch
        self.source_kind = raw.source_kind
        self.graphs = {n: Graph(g, digest) for n, g in raw.graphs.items()}

    def prepare(self):
        """Compiles now the programs a module otherwise compiles on their
        first launch (its decode kernels and its backward), through the
        kernel cache: a server's start-up, so that no call waits for NVRTC.
        Needs no GPU. Returns the module."""
        self.raw.prepare()
        return self

    def __getitem__(self, name):
        try:
            return self.graphs[name]
        except KeyError:
            raise KeyError(f"no graph named {name!r}; the module has "
                           + ", ".join(self.graphs)) from None

    def __getattr__(self, name):
        graphs = self.__dict__.get("graphs", {})
        if name in graphs:
            return graphs[name]
        raise AttributeError(f"no graph named {name!r}; the module has " + ", ".join(graphs))

    def __call__(self, *args, **kwargs):
        if len(self.graphs) != 1:
            raise TypeError(f"the module has {len(self.graphs)} graphs ("
                            + ", ".join(self.graphs) + "): call one by name")
        return next(iter(self.graphs.values()))(*args, **kwargs)

    def __repr__(self):
        return (f"<attnc module for {self.arch}: "
                + "; ".join(g.signature() for g in self.graphs.values()) + ">")


_modules = {}
_modules_lock = threading.Lock()


def _read_source(source, name):
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "{" not in source):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                text = f.read().decode()
        except OSError as e:
            raise AttnError(f"{path}: {e.strerror}", 9, "compile") from None
        return text, name or path
    if isinstance(source, bytes):
        source = source.decode()
    return source, name or "<string>.attn"


def compile(source, *, name=None, arch=None, cache_dir="default", options=None):
    """Compiles .attn source (a path, or the text itself: a string holding
    '{') into a Module. arch: the target ("sm_90a", "sm_80"; None: the
    current device's, which needs a GPU). cache_dir: the kernel cache
    ("default": ATTN_CACHE_DIR or ~/.cache/attnc; None: none). options:
    libattn's tuning options by name (decode_splits, decode, sm90_variant,
    backward_template, persistent_ctas, launch_overlap, exp2_fma). The same
    arguments give the same Module (compiled once per process); each graph
    is a torch operator.
    Errors: SourceError with the compiler's located diagnostics,
    UnsupportedError when no kernel runs a graph."""
    text, name = _read_source(source, name)
    device = _current_device() if arch is None else None
    opts = tuple(sorted((options or {}).items()))
    key = (text, name, arch or device, cache_dir, opts)
    with _modules_lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        ctx = Context(arch=arch, cache_dir=cache_dir, options=dict(opts))
        raw = ctx.compile(text, name)
        digest = hashlib.sha256(repr((text, raw.arch, opts)).encode()).hexdigest()
        mod = Module(raw, digest)
        _modules[key] = mod
    try:
        import torch  # noqa: F401  (the operators exist before anything traces a call)
    except ImportError:
        return mod
    for g in mod.graphs.values():
        g.register()
    return mod


def _current_device():
    """The current CUDA device's compute capability when torch sees one
    (modules for different GPUs are keyed apart), its primary context made
    current for libattn, which then targets that device; None otherwise
    (libattn then says that the target must be given)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    torch.cuda.set_device(index)  # creates the primary context and makes it current
    return "cc%d.%d" % torch.cuda.get_device_capability(index)
