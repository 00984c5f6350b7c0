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
        self.last_backward_amax = {}  # a grad block's amax outputs of the last backward
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

    def _new_outputs(self, tensors):
        """The forward's outputs, shaped from the inputs by the launch plan:
        what the fake implementation returns and the CUDA one writes."""
        from ._torch import torch_dtype
        plan = self._launch_plan()
        for t, spec in zip(tensors, self.inputs):
            if t.dim() != len(spec.dims):
                raise ValueError(f"graph '{self.name}': '{spec.name}' is declared with "
                                 f"{len(spec.dims)} dimensions, given {t.dim()}")
        return [tensors[0].new_empty([d if isinstance(d, int) else tensors[d[0]].shape[d[1]]
                                      for d in dims], dtype=torch_dtype(dtype))
                for _, dtype, dims in plan["outputs"]]

    def _new_grads(self, tensors):
        """The backward's gradients, each shaped like the input it belongs to."""
        from ._torch import torch_dtype
        return [tensors[of].new_empty(tensors[of].shape, dtype=torch_dtype(dtype))
                for _, dtype, of in self._launch_plan()["grads"]]

    def fake_forward(self, tensors):
        outs = self._new_outputs(tensors)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake_backward(self, tensors):
        grads = self._new_grads(tensors)
        return grads[0] if len(grads) == 1 else tuple(grads)

    # The launch path runs on every call: it reuses one attn_call per pass
    # (rebinding every tensor and scalar each time, under the context's lock),
    # binds with precomputed names, and allocates outputs from the shape plan
    # below (the same allocation the fake implementation makes), so the host
    # cost stays a few microseconds above the ctypes calls themselves
    # (bench/python_overhead.py measures it).

    def _launch_plan(self):
        if getattr(self, "_plan", None) is None:
            first = {}
            for i, spec in enumerate(self.inputs):
                for d, sym in enumerate(spec.dims):
                    if isinstance(sym, str):
                        first.setdefault(sym, (i, d))
            outs = []
            for spec in self.outputs:
                dims = []
                for sym in spec.dims:
                    if not isinstance(sym, str):
                        dims.append(sym)
                    elif sym in first:
                        dims.append(first[sym])
                    else:
                        raise ValueError(f"graph '{self.name}': output '{spec.name}' has "
                                         f"dimension {sym}, which no input gives")
                outs.append((spec.name.encode(), spec.dtype, dims))
            self._plan = dict(
                inputs=[(s.name.encode(), bool(s.operand)) for s in self.inputs],
                scalars=[s.name for s in self.scalars],
                outputs=outs,
                dout=self.raw.by_role("grad_input")[0].name.encode() if self.has_backward else None,
                dout_dtype=self.raw.by_role("grad_input")[0].dtype if self.has_backward else None,
                grads=[(s.name.encode(), s.dtype, s.of) for s in self.raw.by_role("grad_output")
                       if s.of is not None],
                # A grad block's amax outputs (f32[1], no input's gradient): bound to
                # scratch the backward writes; autograd has no place to return them.
                amax=[s.name.encode() for s in self.raw.by_role("grad_output") if s.of is None],
                q=next(i for i, s in enumerate(self.inputs) if s.operand == "q"),
                calls={})
        return self._plan

    def _call(self, plan, backward):
        c = plan["calls"].get(backward)
        if c is None or not c.ptr:
            c = plan["calls"][backward] = self.raw.call()
        return c

    def _bind_common(self, call, plan, tensors, scalars, items):
        from ._torch import dtype_int, vector_ready
        call.clear()  # the last launch's shapes must not constrain this one's
        for i, ((name, vector), t) in enumerate(zip(plan["inputs"], tensors)):
            if vector:
                t = tensors[i] = vector_ready(t)
            items.append((name, dtype_int(t), t))
        call.bind_fast(items)
        for name, v in zip(plan["scalars"], scalars):
            call.bind_scalar(name, v)  # a u64 comes back to unsigned there

    def run_forward(self, tensors, scalars):
        import torch
        from . import _torch
        device = tensors[0].device
        if device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                return self.run_forward(tensors, scalars)
        plan = self._launch_plan()
        outs = self._new_outputs(tensors)
        with self.raw.module.ctx.lock:
            call = self._call(plan, False)
            items = [(name, _torch.dtype_int(t), t) for (name, _, _), t in zip(plan["outputs"], outs)]
            self._bind_common(call, plan, tensors, scalars, items)
            ws, region = _torch.workspace(call, device, backward=False)
            call.launch(_torch.stream_of(device), region)
            del ws
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run_backward(self, tensors, outputs, dout, scalars, deterministic):
        import torch
        from . import _torch
        device = tensors[0].device
        if device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                return self.run_backward(tensors, outputs, dout, scalars, deterministic)
        plan = self._launch_plan()
        if plan["dout_dtype"] in ("e4m3", "e5m2"):
            # autograd's dO is real-valued: stored as FP8 without the scale the grad block's
            # descale undoes, most of it would flush to zero or overflow.
            raise NotImplementedError(
                f"graph '{self.name}': its grad block takes dO as {plan['dout_dtype']}; the "
                "Python package passes autograd's dO unscaled, so declare `input do : bf16;` "
                "or run this backward from C through libattn")
        grads = self._new_grads(tensors)
        dout = _torch.vector_ready(dout.to(_torch.torch_dtype(plan["dout_dtype"])))
        with self.raw.module.ctx.lock:
            call = self._call(plan, True)
            items = [(name, _torch.dtype_int(t), t)
                     for (name, _, _), t in zip(plan["outputs"], outputs)]
            items.append((plan["dout"], _torch.dtype_int(dout), dout))
            items += [(name, _torch.dtype_int(t), t) for (name, _, _), t in zip(plan["grads"], grads)]
            amax = [torch.zeros(1, dtype=torch.float32, device=device) for _ in plan["amax"]]
            items += [(name, _torch.dtype_int(t), t) for name, t in zip(plan["amax"], amax)]
            self._bind_common(call, plan, tensors, scalars, items)
            call.set_deterministic(deterministic)
            ws, region = _torch.workspace(call, device, backward=True)
            call.launch_backward(_torch.stream_of(device), region)
            del ws
        # A grad block's amax outputs (f32[1] tensors, written on the stream): autograd has no
        # place for them, so the last backward's are kept here, by name (FP8 delayed scaling).
        self.last_backward_amax = {name.decode(): t for name, t in zip(plan["amax"], amax)}
        return grads[0] if len(grads) == 1 else tuple(grads)
