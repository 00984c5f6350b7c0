"""libattn's objects in Python, without torch: a context (target, cache,
options), a compiled module, its graphs with their signatures, and calls
(bindings and launches by raw device pointer). attnc.compile and the torch
operators are built on these; bench/bench.py uses them directly.

Thread safety: one libattn context must not be used by two threads at once,
so every object here holds its context's lock around each library call
(autograd runs the backward on a thread of its own).
"""
import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from . import _lib
from ._lib import check

ROLES = {_lib.ROLE_INPUT: "input", _lib.ROLE_OUTPUT: "output",
         _lib.ROLE_GRAD_INPUT: "grad_input", _lib.ROLE_GRAD_OUTPUT: "grad_output"}


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a graph's signature (attn_graph_tensor)."""
    index: int
    name: str        # the binding name
    role: str        # "input", "output", "grad_input" (dO), "grad_output" (dq, ...)
    dtype: str       # "bf16", "f16", "f32", "e4m3", "e5m2", "i32", "u64", "bool"
    dims: Tuple[Union[str, int], ...]  # a symbol ("B") or a literal size
    grad: bool       # an input declared in `grad`
    of: Optional[int]  # grad roles: the index of the tensor it is the gradient of
    operand: Optional[str]  # "q", "k" or "v"
    attention_output: bool
    lse: bool


@dataclass(frozen=True)
class ScalarSpec:
    index: int
    name: str
    dtype: str       # "f32", "i32", "u64" or "bool"
    default: Optional[Union[float, int, bool]]  # None: the caller must give it


class Context:
    """An attn_context: the target (None: the current device's), the kernel
    cache directory ("default": ATTN_CACHE_DIR or ~/.cache/attnc; None: no
    disk cache) and tuning options (attn.h's attn_option, by name without
    the ATTN_OPTION_ prefix, lower case: decode_splits=3)."""

    def __init__(self, arch=None, cache_dir="default", options=None):
        self.lib = _lib.library()
        self.lock = threading.RLock()
        self.ptr = ctypes.c_void_p()
        check(self.lib.attn_context_create(ctypes.byref(self.ptr)), None, "attn_context_create")
        try:
            if arch is not None:
                self.set_arch(arch)
            if cache_dir != "default":
                self.set_cache_dir(cache_dir)
            for name, value in (options or {}).items():
                self.set_option(name, value)
        except BaseException:
            self.close()
            raise

    def set_arch(self, arch):
        """The target of the modules compiled next (None: the current device's)."""
        with self.lock:
            check(self.lib.attn_context_set_arch(self.ptr, arch.encode() if arch else None),
                  self.ptr, "arch")

    def set_cache_dir(self, cache_dir):
        """The kernel cache directory (None: no disk cache)."""
        d = os.fsencode(cache_dir) if cache_dir is not None else None
        with self.lock:
            check(self.lib.attn_context_set_cache_dir(self.ptr, d), self.ptr, "cache_dir")

    def set_option(self, name, value):
        """A tuning option by name: compile options apply to the modules
        compiled next, launch options (decode, decode_splits,
        persistent_ctas, launch_overlap) to the next launches."""
        if name not in _lib.OPTIONS:
            raise ValueError(f"unknown option {name!r}; the options are "
                             + ", ".join(sorted(_lib.OPTIONS)))
        with self.lock:
            check(self.lib.attn_context_set_option(self.ptr, _lib.OPTIONS[name], int(value)),
                  self.ptr, f"option {name}")

    def warning(self):
        with self.lock:
            w = self.lib.attn_context_warning(self.ptr)
        return w.decode(errors="replace") if w else ""

    def compile(self, text, name="input.attn"):
        """Compiles .attn text into a RawModule."""
        b = text.encode() if isinstance(text, str) else bytes(text)
        mod = ctypes.c_void_p()
        with self.lock:
            check(self.lib.attn_module_compile_string(self.ptr, name.encode(), b, len(b),
                                                      ctypes.byref(mod)), self.ptr, "compile")
        return RawModule(self, mod)

    def compile_file(self, path):
        mod = ctypes.c_void_p()
        with self.lock:
            check(self.lib.attn_module_compile_file(self.ptr, os.fsencode(path), ctypes.byref(mod)),
                  self.ptr, "compile")
        return RawModule(self, mod)

    def close(self):
        if self.ptr:
            self.lib.attn_context_destroy(self.ptr)
            self.ptr = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class RawModule:
    """A compiled .attn source: its graphs by name. close() frees it (its
    graphs and calls must not be used after); otherwise it lives as long as
    the object."""

    def __init__(self, ctx, ptr):
        self.ctx = ctx
        self.ptr = ptr
        lib = ctx.lib
        names = [lib.attn_module_graph_name(ptr, i).decode()
                 for i in range(lib.attn_module_graph_count(ptr))]
        self.graphs = {n: RawGraph(self, n) for n in names}
        self.arch = lib.attn_module_arch(ptr).decode()
        self.source_kind = {1: "embedded", 2: "embedded_ptx", 3: "cache", 4: "nvrtc"}.get(
            lib.attn_module_source_kind(ptr), "?")

    def prepare(self):
        """Compiles now, through the cache, the programs compiled on their
        first launch otherwise (decode kernels, backward)."""
        with self.ctx.lock:
            check(self.ctx.lib.attn_module_prepare(self.ptr), self.ctx.ptr, "prepare")

    def graph(self, name=None):
        if name is None:
            if len(self.graphs) != 1:
                raise KeyError(f"the module has {len(self.graphs)} graphs ("
                               + ", ".join(self.graphs) + "): name one")
            return next(iter(self.graphs.values()))
        try:
            return self.graphs[name]
        except KeyError:
            raise KeyError(f"no graph named {name!r}; the module has " + ", ".join(self.graphs))

    def close(self):
        if self.ptr:
            with self.ctx.lock:
                self.ctx.lib.attn_module_destroy(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class RawGraph:
    """One graph of a module: its signature and calls."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        ctx, lib = module.ctx, module.ctx.lib
        self.ptr = ctypes.c_void_p()
        check(lib.attn_module_get_graph(module.ptr, name.encode(), ctypes.byref(self.ptr)),
              ctx.ptr, "graph")
        why = ctypes.create_string_buffer(512)
        self.has_backward = bool(lib.attn_graph_has_backward(self.ptr, why, len(why)))
        self.no_backward_reason = None if self.has_backward else why.value.decode(errors="replace")
        self.tensors = []
        for i in range(lib.attn_graph_tensor_count(self.ptr)):
            t = _lib.TensorInfo()
            check(lib.attn_graph_tensor(self.ptr, i, ctypes.byref(t)), ctx.ptr, "signature")
            dims = tuple(t.dim_name[d].decode() if t.dim_name[d] is not None else int(t.dim_size[d])
                         for d in range(t.ndim))
            self.tensors.append(TensorSpec(
                index=i, name=t.name.decode(), role=ROLES[t.role], dtype=_lib.DTYPES[t.dtype],
                dims=dims, grad=bool(t.grad), of=t.of if t.of >= 0 else None,
                operand=chr(t.operand) if t.operand else None,
                attention_output=bool(t.attention_output), lse=bool(t.lse)))
        self.scalars = []
        for i in range(lib.attn_graph_scalar_count(self.ptr)):
            s = _lib.ScalarInfo()
            check(lib.attn_graph_scalar(self.ptr, i, ctypes.byref(s)), ctx.ptr, "signature")
            dtype = _lib.DTYPES[s.dtype]
            default = None
            if s.has_default:
                default = (float(s.default_float) if dtype == "f32"
                           else bool(s.default_int) if dtype == "bool"
                           else int(s.default_int) & 0xFFFFFFFFFFFFFFFF if dtype == "u64"
                           else int(s.default_int))
            self.scalars.append(ScalarSpec(i, s.name.decode(), dtype, default))

    def by_role(self, role):
        return [t for t in self.tensors if t.role == role]

    @property
    def inputs(self):
        return self.by_role("input")

    @property
    def outputs(self):
        return self.by_role("output")

    def call(self):
        return Call(self)

    def signature(self):
        """The graph as a one-line declaration, for messages and repr."""
        def dims(t):
            return ", ".join(str(d) for d in t.dims)
        ins = [f"{t.name}: {t.dtype}[{dims(t)}]" for t in self.inputs]
        ins += [f"{s.name}: {s.dtype}" + (f" = {s.default!r}" if s.default is not None else "")
                for s in self.scalars]
        outs = [f"{t.name}: {t.dtype}[{dims(t)}]" for t in self.outputs]
        return f"{self.name}({', '.join(ins)}) -> ({', '.join(outs)})"


class Call:
    """An attn_call: bindings by name, launches on a stream (a CUstream as
    an int; 0 for the legacy stream). Tensors are bound by device pointer,
    dtype, shape and strides in elements. close() frees it; launches are
    asynchronous, and closing right after one is safe (the kernels hold
    nothing of the call's when it uses a caller's workspace)."""

    def __init__(self, graph):
        self.graph = graph
        self.ctx = graph.module.ctx
        self.lib = self.ctx.lib
        self.ptr = ctypes.c_void_p()
        with self.ctx.lock:
            check(self.lib.attn_call_create(graph.ptr, ctypes.byref(self.ptr)), self.ctx.ptr,
                  "attn_call_create")
        self._scalar_types = {s.name: s.dtype for s in graph.scalars}

    def _check(self, status, what):
        check(status, self.ctx.ptr, what)

    def bind_tensor(self, name, ptr, dtype, shape, strides=None):
        n = len(shape)
        shp = (_lib.I64 * max(n, 1))(*shape)
        st = (_lib.I64 * max(n, 1))(*strides) if strides is not None else None
        code = _lib.DTYPE_CODES[dtype] if isinstance(dtype, str) else int(dtype)
        with self.ctx.lock:
            self._check(self.lib.attn_call_bind_tensor(self.ptr, name.encode(), ctypes.c_void_p(ptr),
                                                       code, n, shp, st), f"bind {name}")

    def bind(self, **tensors):
        """Binds torch tensors by name: call.bind(q=q, k=k, v=v, o=o)."""
        from ._torch import dtype_int
        self.bind_fast([(name.encode(), dtype_int(t), t) for name, t in tensors.items()])

    def bind_fast(self, items):
        """The launch path's binding: items are (name as bytes, attn_dtype
        code, torch tensor), bound under one lock with no per-call
        conversions beyond the shape and stride arrays."""
        lib, ptr = self.lib, self.ptr
        with self.ctx.lock:
            for name, code, t in items:
                n = t.dim()
                arr = _lib.I64 * max(n, 1)
                st = lib.attn_call_bind_tensor(ptr, name, t.data_ptr(), code, n, arr(*t.shape),
                                               arr(*t.stride()))
                if st:
                    self._check(st, "bind " + name.decode())

    def set_tile_counter(self, device_u64):
        """Counts the key tiles the kernels load into one u64 at that device
        address (0: off), for tests and benchmarks."""
        with self.ctx.lock:
            self._check(self.lib.attn_call_set_tile_counter(self.ptr, ctypes.c_void_p(device_u64 or None)),
                        "set_tile_counter")

    def clear(self):
        """Forgets every binding, so the call can be bound for other shapes."""
        with self.ctx.lock:
            self._check(self.lib.attn_call_clear_bindings(self.ptr), "clear_bindings")

    def bind_scalar(self, name, value):
        kind = self._scalar_types.get(name)
        lib = self.lib
        with self.ctx.lock:
            if kind == "i32":
                st = lib.attn_call_bind_i32(self.ptr, name.encode(), int(value))
            elif kind == "u64":
                st = lib.attn_call_bind_u64(self.ptr, name.encode(), int(value) & 0xFFFFFFFFFFFFFFFF)
            elif kind == "bool":
                st = lib.attn_call_bind_bool(self.ptr, name.encode(), 1 if value else 0)
            else:  # f32, or a name the graph does not have: the library says which
                st = lib.attn_call_bind_f32(self.ptr, name.encode(), float(value))
            self._check(st, f"bind {name}")

    def set_deterministic(self, on):
        with self.ctx.lock:
            self._check(self.lib.attn_call_set_deterministic(self.ptr, 1 if on else 0),
                        "set_deterministic")

    def workspace_size(self, backward=False):
        n = ctypes.c_size_t()
        with self.ctx.lock:
            self._check(self.lib.attn_call_workspace_size(
                self.ptr, _lib.PASS_BACKWARD if backward else _lib.PASS_FORWARD, ctypes.byref(n)),
                "workspace_size")
        return n.value

    def launch(self, stream=0, workspace=None):
        """workspace: None (the call keeps its own, allocated on first use) or
        (device pointer, bytes) owned by the caller (CUDA graph capture)."""
        self._launch(False, stream, workspace)

    def launch_backward(self, stream=0, workspace=None):
        self._launch(True, stream, workspace)

    def _launch(self, backward, stream, workspace):
        lib, s = self.lib, ctypes.c_void_p(stream or None)
        with self.ctx.lock:
            if workspace is None:
                fn = lib.attn_call_launch_backward if backward else lib.attn_call_launch
                st = fn(self.ptr, s)
            else:
                fn = (lib.attn_call_launch_backward_with_workspace if backward
                      else lib.attn_call_launch_with_workspace)
                st = fn(self.ptr, ctypes.c_void_p(workspace[0] or None), workspace[1], s)
            self._check(st, "launch_backward" if backward else "launch")

    def close(self):
        if self.ptr:
            with self.ctx.lock:
                self.lib.attn_call_destroy(self.ptr)
            self.ptr = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
