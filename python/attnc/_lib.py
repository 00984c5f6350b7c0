"""libattn through ctypes: finding and loading the library, its prototypes,
the signature structs (attn.h, "a graph's signature") and statuses as
Python exceptions. Nothing here imports torch: compiling, reading a graph's
signature and the refusals work without it.

Lookup order for libattn.so: the path in ATTN_LIBRARY, else a copy beside
this package (attnc/libattn.so.0, put there by `make python-lib`), else the
loader's path (libattn.so.0, e.g. from `make install`).
"""
import ctypes
import os
import threading

from . import _errors

P = ctypes.c_void_p
C = ctypes.c_char_p
I64 = ctypes.c_int64


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", C),
        ("role", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("dim_name", C * 4),
        ("dim_size", I64 * 4),
        ("grad", ctypes.c_int),
        ("of", ctypes.c_int),
        ("operand", ctypes.c_int),
        ("attention_output", ctypes.c_int),
        ("lse", ctypes.c_int),
    ]


class ScalarInfo(ctypes.Structure):
    _fields_ = [
        ("name", C),
        ("dtype", ctypes.c_int),
        ("has_default", ctypes.c_int),
        ("default_float", ctypes.c_double),
        ("default_int", I64),
    ]


# attn.h's enums.
DTYPES = {1: "f16", 2: "bf16", 3: "f32", 4: "e4m3", 5: "e5m2", 6: "i32", 7: "u64", 8: "bool"}
DTYPE_CODES = {v: k for k, v in DTYPES.items()}
ROLE_INPUT, ROLE_OUTPUT, ROLE_GRAD_INPUT, ROLE_GRAD_OUTPUT = 1, 2, 3, 4
PASS_FORWARD, PASS_BACKWARD = 0, 1
OPTIONS = {
    "backward_template": 1,
    "sm90_variant": 2,
    "persistent_ctas": 3,
    "decode_splits": 4,
    "decode": 5,
    "launch_overlap": 6,
    "exp2_fma": 7,
}

_PROTOTYPES = {
    # name: (restype, argtypes)
    "attn_version": (C, []),
    "attn_status_string": (C, [ctypes.c_int]),
    "attn_context_create": (ctypes.c_int, [ctypes.POINTER(P)]),
    "attn_context_destroy": (None, [P]),
    "attn_context_error": (C, [P]),
    "attn_context_warning": (C, [P]),
    "attn_context_clear_error": (None, [P]),
    "attn_context_set_arch": (ctypes.c_int, [P, C]),
    "attn_context_set_cache_dir": (ctypes.c_int, [P, C]),
    "attn_context_set_option": (ctypes.c_int, [P, ctypes.c_int, ctypes.c_longlong]),
    "attn_module_compile_string": (ctypes.c_int, [P, C, C, ctypes.c_size_t, ctypes.POINTER(P)]),
    "attn_module_compile_file": (ctypes.c_int, [P, C, ctypes.POINTER(P)]),
    "attn_module_destroy": (None, [P]),
    "attn_module_prepare": (ctypes.c_int, [P]),
    "attn_module_graph_count": (ctypes.c_int, [P]),
    "attn_module_graph_name": (C, [P, ctypes.c_int]),
    "attn_module_get_graph": (ctypes.c_int, [P, C, ctypes.POINTER(P)]),
    "attn_module_source_kind": (ctypes.c_int, [P]),
    "attn_module_arch": (C, [P]),
    "attn_graph_name": (C, [P]),
    "attn_graph_has_backward": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t]),
    "attn_graph_tensor_count": (ctypes.c_int, [P]),
    "attn_graph_tensor": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(TensorInfo)]),
    "attn_graph_scalar_count": (ctypes.c_int, [P]),
    "attn_graph_scalar": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(ScalarInfo)]),
    "attn_call_create": (ctypes.c_int, [P, ctypes.POINTER(P)]),
    "attn_call_destroy": (None, [P]),
    "attn_call_bind_tensor": (ctypes.c_int, [P, C, P, ctypes.c_int, ctypes.c_int,
                                              ctypes.POINTER(I64), ctypes.POINTER(I64)]),
    "attn_call_clear_bindings": (ctypes.c_int, [P]),
    "attn_call_bind_f32": (ctypes.c_int, [P, C, ctypes.c_float]),
    "attn_call_bind_i32": (ctypes.c_int, [P, C, ctypes.c_int32]),
    "attn_call_bind_u64": (ctypes.c_int, [P, C, ctypes.c_uint64]),
    "attn_call_bind_bool": (ctypes.c_int, [P, C, ctypes.c_int]),
    "attn_call_launch": (ctypes.c_int, [P, P]),
    "attn_call_launch_backward": (ctypes.c_int, [P, P]),
    "attn_call_set_deterministic": (ctypes.c_int, [P, ctypes.c_int]),
    "attn_call_set_tile_counter": (ctypes.c_int, [P, P]),
    "attn_call_workspace_size": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]),
    "attn_call_launch_with_workspace": (ctypes.c_int, [P, P, ctypes.c_size_t, P]),
    "attn_call_launch_backward_with_workspace": (ctypes.c_int, [P, P, ctypes.c_size_t, P]),
    # the ring (docs/ring.md); attn_ring_create (a C transport) is for C callers
    "attn_ring_create_nccl": (ctypes.c_int, [P, P, ctypes.c_int, ctypes.POINTER(P)]),
    "attn_ring_destroy": (None, [P]),
    "attn_ring_bind_tensor": (ctypes.c_int, [P, C, P, ctypes.c_int, ctypes.c_int,
                                              ctypes.POINTER(I64), ctypes.POINTER(I64)]),
    "attn_ring_bind_f32": (ctypes.c_int, [P, C, ctypes.c_float]),
    "attn_ring_bind_i32": (ctypes.c_int, [P, C, ctypes.c_int32]),
    "attn_ring_bind_u64": (ctypes.c_int, [P, C, ctypes.c_uint64]),
    "attn_ring_bind_bool": (ctypes.c_int, [P, C, ctypes.c_int]),
    "attn_ring_forward": (ctypes.c_int, [P, P]),
    "attn_ring_backward": (ctypes.c_int, [P, P]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        return [env]  # an explicit choice: no fallback that would hide a typo
    here = os.path.dirname(os.path.abspath(__file__))
    beside = [os.path.join(here, n) for n in ("libattn.so.0", "libattn.so")]
    return [p for p in beside if os.path.exists(p)] + ["libattn.so.0"]


def library():
    """The loaded libattn (a ctypes.CDLL with prototypes set), loaded once."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        from . import __version__
        tried = []
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path}: {e}")
                continue
            for name, (res, args) in _PROTOTYPES.items():
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    raise _errors.LibraryError(
                        f"{path} has no {name}: it is older than this attnc package "
                        f"({__version__}); rebuild libattn or point ATTN_LIBRARY at a newer one")
                fn.restype = res
                fn.argtypes = args
            version = lib.attn_version().decode()
            if version != __version__:
                raise _errors.LibraryError(
                    f"{path} is libattn {version}, but this attnc package is {__version__}: "
                    "they are released together (pip install the python/ folder of the same "
                    "checkout, or set ATTN_LIBRARY)")
            _lib, _lib_path = lib, path
            return lib
        raise _errors.LibraryError(
            "libattn not found (set ATTN_LIBRARY to libattn.so, run `make python-lib` before "
            "`pip install ./python`, or put libattn.so.0 on the loader's path); tried:\n  "
            + "\n  ".join(tried))


def library_path():
    library()
    return _lib_path


def check(status, ctx, what):
    """Raises the exception for a failed status, with the context's message."""
    if status == 0:
        return
    lib = library()
    msg = lib.attn_context_error(ctx) if ctx else None
    msg = msg.decode(errors="replace") if msg else lib.attn_status_string(status).decode()
    raise _errors.error_for(status, msg, what)
