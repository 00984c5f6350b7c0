"""A compiled graph as a PyTorch callable: argument handling (positional or
by name, defaults, 0-d tensors as scalars), output allocation from the
signature's dimension symbols, and the launches its torch operators make
(_torch.py registers them)."""
import hashlib

from ._core import RawGraph


class Graph:
    """g(q, k, v, bias=..., scale=...) -> the graph's outputs, as torch
    tensors (one tensor, or a tuple in declaration order). Tensors first, in
    declaration order, then scalars; any of them by name. A scalar with a
    default may be left out; scalars are Python numbers or 0-d tensors (a
    0-d CUDA tensor is read with .item(), a device sync: pass Python numbers
    under CUDA graph capture and torch.compile). deterministic=True runs the
    backward without floating-point atomics (docs/runtime.md, "Backward").

    Gradients flow from the attention output (softmax(..) @ v) to each input
    declared in `grad`; other outputs (lse) are not differentiable."""

    def __init__(self, raw: RawGraph, digest: str):
        self.raw = raw
        self.name = raw.name
        self.inputs = raw.inputs
        self.outputs = raw.outputs
        self.scalars = raw.scalars
        self.has_backward = raw.has_backward
        self._input_pos = {t.name: i for i, t in enumerate(self.inputs)}
        self._scalar_pos = {s.name: i for i, s in enumerate(self.scalars)}
        h = hashlib.sha256(f"{digest}/{raw.name}".encode()).hexdigest()[:16]
        self.op_name = f"{raw.name}_{h}"
        self._op = None

    def __repr__(self):
        return f"<attnc graph {self.raw.signature()}>"

    def signature(self):
        return self.raw.signature()

    # ------------------------------------------------------------ calling

    def register(self):
        """The graph's torch operator (torch.ops.attnc.<op_name>), defined on
        first use; attnc.compile defines it at once when torch is there."""
        if self._op is None:
            from . import _torch
            self._op = _torch.register(self, self.op_name)
        return self._op

    def __call__(self, *args, deterministic=False, **kwargs):
        tensors, scalars = self._arguments(args, kwargs)
        self._check_grad(tensors)
        out = self.register()(*tensors, *scalars, bool(deterministic))
        return out

    def _arguments(self, args, kwargs):
        nin = len(self.inputs)
        if len(args) > nin + len(self.scalars):
            raise TypeError(f"{self.name}() takes {nin} tensors and {len(self.scalars)} scalars; "
                            f"got {len(args)} positional arguments ({self.raw.signature()})")
        tensors = list(args[:nin]) + [None] * max(0, nin - len(args))
        scalars = list(args[nin:]) + [None] * (len(self.scalars) - max(0, len(args) - nin))
        for key, value in kwargs.items():
            if key in self._input_pos:
                slot, pos = tensors, self._input_pos[key]
            elif key in self._scalar_pos:
                slot, pos = scalars, self._scalar_pos[key]
            else:
                raise TypeError(f"{self.name}() has no argument {key!r} ({self.raw.signature()})")
            if slot[pos] is not None:
                raise TypeError(f"{self.name}() got {key!r} twice")
            slot[pos] = value
        for t, spec in zip(tensors, self.inputs):
            if t is None:
                raise TypeError(f"{self.name}() needs the tensor {spec.name!r} "
                                f"({self.raw.signature()})")
        for i, spec in enumerate(self.scalars):
            v = scalars[i]
            if v is None:
                if spec.default is None:
                    raise TypeError(f"{self.name}() needs the scalar {spec.name!r}, which has no "
                                    f"default ({self.raw.signature()})")
                v = spec.default
            elif hasattr(v, "item") and getattr(v, "dim", lambda: 1)() == 0:
                v = v.item()
            if spec.dtype == "f32":
                v = float(v)
            elif spec.dtype == "bool":
                v = bool(v)
            else:
                v = int(v)
                if spec.dtype == "u64":  # the schema's int is signed 64-bit
                    v &= 0xFFFFFFFFFFFFFFFF
                    v = v - (1 << 64) if v >= (1 << 63) else v
            scalars[i] = v
        return tensors, scalars

    def _check_grad(self, tensors):
        import torch
        if not torch.is_grad_enabled():
            return
        for t, spec in zip(tensors, self.inputs):
            if not t.requires_grad:
                continue
            if not self.has_backward:
                raise RuntimeError(f"{spec.name!r} requires grad, but graph '{self.name}' has no "
                                   f"backward: {self.raw.no_backward_reason}")
            if not spec.grad:
                raise RuntimeError(f"{spec.name!r} requires grad, but graph '{self.name}' declares "
                                   f"no gradient for it: add it to `grad`, or detach() it")

    # ------------------------------------------------- shapes and launches

    def _dims(self, tensors):
        """The dimension symbols' sizes, from the inputs' shapes."""
        dims = {}
        for t, spec in zip(tensors, self.inputs):
            if t.dim() != len(spec.dims):
                raise ValueError(f"graph '{self.name}': '{spec.name}' is declared with "
                                 f"{len(spec.dims)} dimensions, given {t.dim()}")
            for d, size in zip(spec.dims, t.shape):
                if isinstance(d, str):
                    dims.setdefault(d, size)
        return dims

    def _shape(self, spec, dims):
        shape = []
        for d in spec.dims:
            if isinstance(d, int):
                shape.append(d)
            elif d in dims:
                shape.append(dims[d])
            else:
                raise ValueError(f"graph '{self.name}': output '{spec.name}' has dimension {d}, "
                                 "which no input gives")
        return shape

    def fake_forward(self, tensors):
        from ._torch import torch_dtype
        dims = self._dims(tensors)
        q = tensors[0]
        outs = [q.new_empty(self._shape(s, dims), dtype=torch_dtype(s.dtype)) for s in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake_backward(self, tensors):
        from ._torch import torch_dtype
        grads = [tensors[s.of].new_empty(tensors[s.of].shape, dtype=torch_dtype(s.dtype))
                 for s in self.raw.by_role("grad_output")]
        return grads[0] if len(grads) == 1 else tuple(grads)

    def _bind_inputs(self, call, tensors, scalars):
        from . import _torch
        for i, (t, spec) in enumerate(zip(tensors, self.inputs)):
            if spec.operand:
                t = tensors[i] = _torch.vector_ready(t)
            _torch.bind(call, spec, t)
        for v, spec in zip(scalars, self.scalars):
            call.bind_scalar(spec.name, v & 0xFFFFFFFFFFFFFFFF if spec.dtype == "u64" else v)

    def run_forward(self, tensors, scalars):
        import torch
        from . import _torch
        device = tensors[0].device
        with torch.cuda.device(device):
            outs = self.fake_forward(tensors)
            outs = list(outs) if isinstance(outs, tuple) else [outs]
            with self.raw.call() as call:
                self._bind_inputs(call, tensors, scalars)
                for t, spec in zip(outs, self.outputs):
                    _torch.bind(call, spec, t)
                ws, region = _torch.workspace(call, device, backward=False)
                call.launch(_torch.stream_of(device), region)
                del ws
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_backward(self, tensors, outputs, dout, scalars, deterministic):
        import torch
        from . import _torch
        device = tensors[0].device
        with torch.cuda.device(device):
            grads = self.fake_backward(tensors)
            grads = list(grads) if isinstance(grads, tuple) else [grads]
            q_type = next(t for t, s in zip(tensors, self.inputs) if s.operand == "q").dtype
            dout = _torch.vector_ready(dout.to(q_type))
            with self.raw.call() as call:
                self._bind_inputs(call, tensors, scalars)
                for t, spec in zip(outputs, self.outputs):
                    _torch.bind(call, spec, t)
                (dspec,) = self.raw.by_role("grad_input")
                _torch.bind(call, dspec, dout)
                for t, spec in zip(grads, self.raw.by_role("grad_output")):
                    _torch.bind(call, spec, t)
                if deterministic:
                    call.set_deterministic(True)
                ws, region = _torch.workspace(call, device, backward=True)
                call.launch_backward(_torch.stream_of(device), region)
                del ws
        return grads[0] if len(grads) == 1 else tuple(grads)
