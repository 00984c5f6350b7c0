"""Each graph as a torch.library custom operator, with a fake (meta)
implementation and autograd, so that a model calling it runs eagerly,
under torch.compile(fullgraph=True) without graph breaks, and inside CUDA
graph capture.

    attnc::<graph>_<digest>           (inputs..., scalars..., deterministic) -> outputs
    attnc::<graph>_<digest>_backward  (inputs..., outputs..., dO, scalars..., deterministic)
                                      -> the gradients the graph declares

The digest names the compiled kernels (source, target, options), so two
modules compiled from the same text share their operators. Operator
arguments are positional (t0, t1, ..., s0, ...): user names may clash with
the schema language. Outputs and the workspace come from PyTorch's
allocator on the current stream; the launch makes no host sync and
allocates nothing itself, which is what capture needs.
"""
import torch

from . import _lib

_TORCH_DTYPES = {
    torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
    torch.int32: "i32", torch.bool: "bool",
}
for _name, _code in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2"), ("uint64", "u64")):
    if hasattr(torch, _name):
        _TORCH_DTYPES[getattr(torch, _name)] = _code
_ATTN_DTYPES = {v: k for k, v in _TORCH_DTYPES.items()}
_TORCH_CODES = {k: _lib.DTYPE_CODES[v] for k, v in _TORCH_DTYPES.items()}
_SCHEMA_SCALAR = {"f32": "float", "i32": "int", "u64": "int", "bool": "bool"}

_LIB = torch.library.Library("attnc", "FRAGMENT")
_OPS = {}  # op name -> the Graph its CUDA implementation runs


def torch_dtype(code):
    try:
        return _ATTN_DTYPES[code]
    except KeyError:
        raise TypeError(f"this PyTorch has no dtype for attnc's {code}")


def dtype_int(t):
    """attn.h's attn_dtype of a tensor, for the launch path's bindings."""
    try:
        return _TORCH_CODES[t.dtype]
    except KeyError:
        raise TypeError(f"attnc takes no {t.dtype} tensors") from None


def register(graph, op_name):
    """Defines (once per op name) the graph's forward and backward operators;
    later modules with the same digest take them over."""
    first = op_name not in _OPS
    _OPS[op_name] = graph
    if first:
        _define(graph, op_name)
    return getattr(torch.ops.attnc, op_name)


def _define(graph, op_name):
    raw = graph.raw
    nin, nsc = len(raw.inputs), len(raw.scalars)
    nout = len(raw.outputs)
    ins = [f"Tensor t{i}" for i in range(nin)]
    scs = [f"{_SCHEMA_SCALAR[s.dtype]} s{i}" for i, s in enumerate(raw.scalars)]
    outs = "Tensor" if nout == 1 else "(" + ", ".join(["Tensor"] * nout) + ")"
    _LIB.define(f"{op_name}({', '.join(ins + scs + ['bool deterministic'])}) -> {outs}")
    qual = f"attnc::{op_name}"

    def forward_cuda(*args):
        return _OPS[op_name].run_forward(list(args[:nin]), list(args[nin:nin + nsc]))

    def forward_fake(*args):
        return _OPS[op_name].fake_forward(list(args[:nin]))

    _LIB.impl(op_name, forward_cuda, "CUDA")
    torch.library.register_fake(qual, forward_fake, lib=_LIB)
    if not raw.has_backward:
        return
    grads = [g for g in raw.by_role("grad_output") if g.of is not None]  # not amax outputs
    bwd_name = op_name + "_backward"
    bins = [f"Tensor t{i}" for i in range(nin)] + [f"Tensor o{i}" for i in range(nout)]
    gouts = "Tensor" if len(grads) == 1 else "(" + ", ".join(["Tensor"] * len(grads)) + ")"
    _LIB.define(f"{bwd_name}({', '.join(bins + ['Tensor dout'] + scs + ['bool deterministic'])})"
                f" -> {gouts}")

    def backward_cuda(*args):
        g = _OPS[op_name]
        return g.run_backward(list(args[:nin]), list(args[nin:nin + nout]), args[nin + nout],
                              list(args[nin + nout + 1:nin + nout + 1 + nsc]), args[-1])

    def backward_fake(*args):
        return _OPS[op_name].fake_backward(list(args[:nin]))

    _LIB.impl(bwd_name, backward_cuda, "CUDA")
    torch.library.register_fake(f"attnc::{bwd_name}", backward_fake, lib=_LIB)
    bwd_op = getattr(torch.ops.attnc, bwd_name)
    attn_out = next(i for i, t in enumerate(raw.outputs) if t.attention_output)
    grad_inputs = [g.of for g in grads]  # tensor index == position among the inputs

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, (tuple, list)) else (output,)
        ctx.save_for_backward(*inputs[:nin], *outs)
        ctx.scalars = inputs[nin:nin + nsc]
        ctx.deterministic = inputs[-1]
        for i in range(nout):  # gradients flow through the attention output only
            if i != attn_out:
                ctx.mark_non_differentiable(outs[i])

    def backward(ctx, *grad_outs):
        saved = ctx.saved_tensors
        dout = grad_outs[attn_out]
        result = [None] * (nin + nsc + 1)
        if dout is None:
            return tuple(result)
        got = bwd_op(*saved[:nin], *saved[nin:], dout, *ctx.scalars, ctx.deterministic)
        got = got if isinstance(got, (tuple, list)) else (got,)
        for idx, g in zip(grad_inputs, got):
            if ctx.needs_input_grad[idx]:
                result[idx] = g
        return tuple(result)

    torch.library.register_autograd(qual, backward, setup_context=setup_context, lib=_LIB)


def vector_ready(t):
    """t as the kernels' 16-byte vector loads take it (q, k, v, dO): inner
    stride 1, other strides multiples of 16 bytes, 16-byte aligned base, no
    zero strides; else a contiguous copy."""
    if t.numel() == 0:
        return t
    size = t.element_size()
    ok = t.data_ptr() % 16 == 0
    for d in range(t.dim()):
        n, s = t.shape[d], t.stride(d)
        if n == 1:
            continue
        if d == t.dim() - 1:
            ok = ok and s == 1
        else:
            ok = ok and s > 0 and (s * size) % 16 == 0
    return t if ok else t.contiguous()


def stream_of(device):
    return torch.cuda.current_stream(device).cuda_stream


def workspace(call, device, backward):
    """The pass's workspace from PyTorch's allocator (freed to its cache
    when the launch returns: stream-ordered, so the kernels still own it)."""
    n = call.workspace_size(backward)
    if n == 0:
        return None, (0, 0)
    ws = torch.empty(n, dtype=torch.uint8, device=device)
    return ws, (ws.data_ptr(), n)
