"""libattn's ring (attn_ring_*, docs/ring.md) from PyTorch: the key/value shards move over NCCL
inside libattn, not through torch.distributed.

    comm = attnc.NcclComm()                        # one NCCL communicator for the process group
    o, lse = attnc.c_ring_attention(graph, comm, q, k, v, layout="zigzag")
    o.backward(do)                                 # dq, dk, dv by the ring's backward

NcclComm makes the communicator from a torch.distributed process group (rank 0's NCCL unique id
broadcast over the group, then ncclCommInitRank on the current CUDA device), with the libnccl
PyTorch's own wheel ships (or ATTN_NCCL); libattn opens the same library by its soname or
ATTN_NCCL. The graph follows docs/ring.md's rules (q0 and k0 scalars, `output lse`), the same
graphs as attnc.ring_attention's, which does the same protocol in Python over torch.distributed.
"""
import ctypes
import os

from . import _lib

LAYOUTS = {"contiguous": 0, "zigzag": 1}


class _NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _nccl_path():
    path = os.environ.get("ATTN_NCCL")
    if path:
        return path
    try:
        import nvidia.nccl  # PyTorch's wheel
        return os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2")
    except ImportError:
        return "libnccl.so.2"


class NcclComm:
    """An NCCL communicator over the ranks of a torch.distributed group, on the current CUDA
    device; the same libnccl libattn opens (ATTN_NCCL is set to it when unset, so both agree)."""

    def __init__(self, group=None):
        import torch
        import torch.distributed as dist
        if not dist.is_initialized():
            raise RuntimeError("NcclComm needs torch.distributed initialized")
        path = _nccl_path()
        os.environ.setdefault("ATTN_NCCL", path)
        self._lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        self._lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(_NcclUniqueId)]
        self._lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                               _NcclUniqueId, ctypes.c_int]
        self._lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
        self._lib.ncclGetErrorString.restype = ctypes.c_char_p
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        uid = _NcclUniqueId()
        if self.rank == 0:
            self._check(self._lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        buf = torch.tensor(list(uid.internal.ljust(128, b"\0")), dtype=torch.uint8, device=device)
        dist.broadcast(buf, src=dist.get_global_rank(group, 0) if group else 0, group=group)
        uid = _NcclUniqueId.from_buffer_copy(bytes(buf.cpu().tolist()))
        self.ptr = ctypes.c_void_p()
        self._check(self._lib.ncclCommInitRank(ctypes.byref(self.ptr), self.world, uid, self.rank),
                    "ncclCommInitRank")

    def _check(self, r, what):
        if r:
            raise RuntimeError(f"{what}: {self._lib.ncclGetErrorString(r).decode()} (NCCL error {r})")

    def close(self):
        if getattr(self, "ptr", None):
            self._lib.ncclCommDestroy(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class CRing:
    """libattn's ring over graph (an attnc graph or RawGraph) and a communicator: an NcclComm,
    or the address of an ncclComm_t made elsewhere. bind() takes this rank's shards and any other
    tensor or scalar by the graph's names; forward() and backward() launch on the current
    stream."""

    def __init__(self, graph, comm, layout="zigzag"):
        if layout not in LAYOUTS:
            raise ValueError(f"layout '{layout}' (want 'contiguous' or 'zigzag')")
        self.raw = getattr(graph, "raw", graph)
        self.ctx = self.raw.module.ctx
        self.comm = comm  # kept alive as long as the ring
        ptr = comm.ptr if isinstance(comm, NcclComm) else ctypes.c_void_p(comm)
        self.ptr = ctypes.c_void_p()
        with self.ctx.lock:
            _lib.check(self.ctx.lib.attn_ring_create_nccl(self.raw.ptr, ptr, LAYOUTS[layout],
                                                           ctypes.byref(self.ptr)),
                       self.ctx.ptr, "ring")
        self._scalar_types = {s.name: s.dtype for s in self.raw.scalars}

    def bind(self, **args):
        from ._torch import dtype_int
        lib = self.ctx.lib
        with self.ctx.lock:
            for name, x in args.items():
                if name in self._scalar_types:
                    kind = self._scalar_types[name]
                    fn = {"f32": lib.attn_ring_bind_f32, "i32": lib.attn_ring_bind_i32,
                          "u64": lib.attn_ring_bind_u64, "bool": lib.attn_ring_bind_bool}[kind]
                    st = fn(self.ptr, name.encode(), float(x) if kind == "f32" else int(x))
                else:
                    shape = (_lib.I64 * x.dim())(*x.shape)
                    strides = (_lib.I64 * x.dim())(*x.stride())
                    st = lib.attn_ring_bind_tensor(self.ptr, name.encode(), ctypes.c_void_p(x.data_ptr()),
                                                   dtype_int(x), x.dim(), shape, strides)
                _lib.check(st, self.ctx.ptr, f"binding '{name}'")

    def _launch(self, fn, what):
        import torch
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        with self.ctx.lock:
            _lib.check(fn(self.ptr, stream), self.ctx.ptr, what)

    def forward(self):
        self._launch(self.ctx.lib.attn_ring_forward, "ring forward")

    def backward(self):
        self._launch(self.ctx.lib.attn_ring_backward, "ring backward")

    def close(self):
        if getattr(self, "ptr", None):
            with self.ctx.lock:
                self.ctx.lib.attn_ring_destroy(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_RINGS = {}


def _names(raw):
    """The ring's binding names: q, k, v, o, lse, and dO's and the gradients' when there is a
    backward."""
    ins = {t.operand: t.name for t in raw.inputs if t.operand}
    o = next(t.name for t in raw.outputs if t.attention_output)
    lse = next((t.name for t in raw.outputs if t.lse), None)
    if lse is None:
        raise ValueError(f"graph '{raw.name}' has no `output lse = logsumexp(s)` (docs/ring.md)")
    return ins["q"], ins["k"], ins["v"], o, lse


def c_ring_attention(graph, comm, q, k, v, layout="zigzag", **extra):
    """This rank's o and lse over every rank's keys and values by libattn's ring (see CRing);
    differentiable in q, k and v (the ring's backward). extra: the graph's other tensors and
    scalars, passed to every launch."""
    import torch

    raw = getattr(graph, "raw", graph)
    key = (id(raw), id(comm), layout)
    ring = _RINGS.get(key)
    if ring is None:  # one ring (stream, events, buffers) per graph, communicator and layout
        ring = _RINGS[key] = CRing(graph, comm, layout)
    nq, nk, nv, no, nl = _names(ring.raw)
    from ._torch import torch_dtype
    o_dtype = torch_dtype(next(t.dtype for t in ring.raw.outputs if t.name == no))

    class _Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q_, k_, v_):
            q_, k_, v_ = q_.contiguous(), k_.contiguous(), v_.contiguous()
            o = q_.new_empty(q_.shape[:-1] + (v_.shape[-1],), dtype=o_dtype)
            lse = torch.empty(q_.shape[:-1], device=q_.device, dtype=torch.float32)
            ring.bind(**{nq: q_, nk: k_, nv: v_, no: o, nl: lse}, **extra)
            ring.forward()
            ctx.save_for_backward(q_, k_, v_, o, lse)
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, do, dlse):
            q_, k_, v_, o, lse = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q_), torch.empty_like(k_), torch.empty_like(v_)
            ring.bind(**{nq: q_, nk: k_, nv: v_, no: o, nl: lse, "d" + no: do.contiguous(),
                         "d" + nq: dq, "d" + nk: dk, "d" + nv: dv}, **extra)
            ring.backward()
            return dq, dk, dv

    return _Fn.apply(q, k, v)
