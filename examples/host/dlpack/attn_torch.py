#!/usr/bin/env python3
"""PyTorch tensors into libattn through DLPack and ctypes.

Loads libattn.so (LIBATTN=path, or the argument, else libattn.so.0 from the
loader's path), compiles an .attn graph, binds PyTorch CUDA tensors with
attn_call_bind_dlpack (each a DLManagedTensor* taken from a DLPack capsule),
launches on PyTorch's current stream and compares the output with
torch.nn.functional.scaled_dot_product_attention. Prints PASS or FAIL.

    python3 attn_torch.py [path/to/libattn.so]
"""
import ctypes
import os
import sys

SOURCE = b"""
attention sdpa_causal {
  input  q : bf16[B, H, Sq, 128];
  input  k : bf16[B, H, Skv, 128];
  input  v : bf16[B, H, Skv, 128];
  scalar scale : f32 = 1.0 / sqrt(128.0);
  s = mask((q @ k^T) * scale, j <= i);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 128];
}
"""


def load_libattn(path):
    lib = ctypes.CDLL(path)
    P, C = ctypes.c_void_p, ctypes.c_char_p
    sigs = {
        "attn_context_create": [ctypes.POINTER(P)],
        "attn_context_error": [P],
        "attn_module_compile_string": [P, C, C, ctypes.c_size_t, ctypes.POINTER(P)],
        "attn_module_get_graph": [P, C, ctypes.POINTER(P)],
        "attn_module_source_kind": [P],
        "attn_call_create": [P, ctypes.POINTER(P)],
        "attn_call_bind_dlpack": [P, C, P],
        "attn_call_bind_f32": [P, C, ctypes.c_float],
        "attn_call_launch": [P, P],
        "attn_call_destroy": [P],
        "attn_module_destroy": [P],
        "attn_context_destroy": [P],
        "attn_version": [],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    lib.attn_context_error.restype = C
    lib.attn_version.restype = C
    for name in ("attn_call_destroy", "attn_module_destroy", "attn_context_destroy"):
        getattr(lib, name).restype = None
    return lib


# A DLPack capsule ("dltensor") holds a DLManagedTensor*, whose first member
# is the DLTensor: that pointer is what attn_call_bind_dlpack takes. The
# capsule is not consumed, so PyTorch still owns (and frees) the tensor.
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_capsule(t):
    import torch.utils.dlpack
    return torch.utils.dlpack.to_dlpack(t)


class Attn:
    def __init__(self, lib):
        self.lib = lib
        self.ctx = ctypes.c_void_p()
        self.check(lib.attn_context_create(ctypes.byref(self.ctx)), "context")

    def check(self, status, what):
        if status != 0:
            msg = self.lib.attn_context_error(self.ctx) if self.ctx else b""
            raise RuntimeError(f"{what}: status {status}: {msg.decode(errors='replace')}")


def main():
    import torch
    import torch.nn.functional as F

    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LIBATTN", "libattn.so.0")
    lib = load_libattn(path)
    print(f"libattn {lib.attn_version().decode()} from {path}; torch {torch.__version__}")
    if not torch.cuda.is_available():
        print("no GPU here: nothing to run")
        return 0
    torch.manual_seed(0)
    dev = torch.device("cuda")
    B, H, Sq, Skv, D = 2, 8, 333, 333, 128
    q = torch.randn(B, Sq, H, D, device=dev, dtype=torch.bfloat16).transpose(1, 2)  # strided view
    k = torch.randn(B, H, Skv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, H, Skv, D, device=dev, dtype=torch.bfloat16)
    o = torch.empty(B, H, Sq, D, device=dev, dtype=torch.bfloat16)

    a = Attn(lib)
    mod, graph, call = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    a.check(lib.attn_module_compile_string(a.ctx, b"sdpa_causal.attn", SOURCE, len(SOURCE),
                                           ctypes.byref(mod)), "compile")
    print("kernels from path", lib.attn_module_source_kind(mod), "(3 cache, 4 NVRTC)")
    a.check(lib.attn_module_get_graph(mod, None, ctypes.byref(graph)), "graph")
    a.check(lib.attn_call_create(graph, ctypes.byref(call)), "call")
    capsules = {}
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        capsules[name] = dlpack_capsule(t)  # keep alive until the launch is done
        ptr = _get_pointer(capsules[name], b"dltensor")
        a.check(lib.attn_call_bind_dlpack(call, name.encode(), ptr), f"bind {name}")
    scale = 0.07
    a.check(lib.attn_call_bind_f32(call, b"scale", scale), "bind scale")
    stream = torch.cuda.current_stream().cuda_stream
    a.check(lib.attn_call_launch(call, ctypes.c_void_p(stream)), "launch")
    torch.cuda.synchronize()

    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                         scale=scale)
    err = (o.float() - ref).norm() / ref.norm()
    print(f"relative error vs torch.nn.functional.scaled_dot_product_attention: {err.item():.3e}")
    # A wrong binding must come back as a status with a message, not a crash.
    bad = dlpack_capsule(torch.empty(B, H, Sq, D, device=dev, dtype=torch.float16))
    st = lib.attn_call_bind_dlpack(call, b"q", _get_pointer(bad, b"dltensor"))
    print("binding f16 to the bf16 q:", st, lib.attn_context_error(a.ctx).decode())
    lib.attn_call_destroy(call)
    lib.attn_module_destroy(mod)
    lib.attn_context_destroy(a.ctx)
    ok = err.item() < 2e-2 and st != 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
