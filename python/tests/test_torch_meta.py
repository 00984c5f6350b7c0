"""The torch operators without a GPU: meta tensors run the fake
implementation and the autograd wiring, and torch.compile traces a call
without graph breaks."""
import os

import pytest

import attnc
from conftest import needs_torch
from test_compile import SDPA

pytestmark = needs_torch

FWD_ONLY = """
attention plain {
  input  q : bf16[B, H, S, 128];
  input  k : bf16[B, H, S, 128];
  input  v : bf16[B, H, S, 128];
  input  doc : i32[B, S];
  scalar seed : u64 = 1;
  o = softmax(mask(q @ k^T, doc[b, i] == doc[b, j])) @ v;
  output o : bf16[B, H, S, 128];
}
"""


@pytest.fixture(scope="module")
def sdpa(cache_dir):
    return attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir).sdpa


def meta(*shape, dtype=None, grad=False):
    import torch
    t = torch.randn(*shape, device="meta", dtype=dtype or torch.bfloat16)
    return t.requires_grad_(grad)


def test_outputs_take_their_shapes_from_the_inputs(sdpa):
    import torch
    q, k, v = meta(2, 8, 33, 64), meta(2, 2, 70, 64), meta(2, 2, 70, 64)
    bias = meta(1, 8, 33, 70, dtype=torch.float32)
    o, lse = sdpa(q, k, v, bias)
    assert o.shape == (2, 8, 33, 64) and o.dtype == torch.bfloat16 and o.device.type == "meta"
    assert lse.shape == (2, 8, 33) and lse.dtype == torch.float32
    # By name, in any order, scalars too.
    o2, _ = sdpa(v=v, k=k, q=q, bias=bias, window=4, scale=0.5)
    assert o2.shape == o.shape


def test_autograd_gives_a_gradient_per_declared_input(sdpa):
    import torch
    q, k, v = meta(2, 8, 33, 64, grad=True), meta(2, 2, 70, 64, grad=True), meta(2, 2, 70, 64)
    bias = meta(1, 8, 33, 70, dtype=torch.float32)
    o, lse = sdpa(q, k, v, bias)
    assert o.requires_grad and not lse.requires_grad  # lse is not differentiable
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad is None


def test_torch_compile_traces_a_call_without_graph_breaks(sdpa):
    import torch

    def model(q, k, v, bias):
        o, lse = sdpa(q, k, v, bias=bias, scale=0.1)
        return (o.float() * 2).sum() + lse.sum()

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    q, k, v = meta(2, 8, 64, 64, grad=True), meta(2, 2, 64, 64, grad=True), meta(2, 2, 64, 64, grad=True)
    bias = meta(1, 8, 64, 64, dtype=torch.float32)
    loss = compiled(q, k, v, bias)
    loss.backward()
    assert q.grad.shape == q.shape and v.grad.shape == v.shape


def test_argument_errors_name_what_is_wrong(sdpa):
    import torch
    q, k, v = meta(2, 8, 33, 64), meta(2, 2, 70, 64), meta(2, 2, 70, 64)
    bias = meta(1, 8, 33, 70, dtype=torch.float32)
    with pytest.raises(TypeError, match="needs the tensor 'bias'"):
        sdpa(q, k, v)
    with pytest.raises(TypeError, match="no argument 'temperature'"):
        sdpa(q, k, v, bias, temperature=2.0)
    with pytest.raises(TypeError, match="got 'q' twice"):
        sdpa(q, k, v, bias, q=q)
    with pytest.raises(TypeError, match="takes 4 tensors and 2 scalars"):
        sdpa(q, k, v, bias, 1.0, 2, 3)
    with pytest.raises(ValueError, match="declared with 4 dimensions, given 3"):
        sdpa(q[0], k, v, bias)
    with pytest.raises(RuntimeError, match="declares no gradient for it"):
        sdpa(q, k, v, bias.requires_grad_(True))


def test_scalars_from_numbers_and_zero_dim_tensors(sdpa, cache_dir):
    import torch
    tensors, scalars = sdpa._arguments((1, 2, 3, 4), {"scale": torch.tensor(0.25), "window": 7.0})
    assert scalars == [0.25, 7] and isinstance(scalars[1], int)
    plain = attnc.compile(FWD_ONLY, arch="sm_90a", cache_dir=cache_dir).plain
    # u64 beyond 2^63 passes through the schema's signed int and back.
    _, s = plain._arguments((1, 2, 3, 4), {"seed": 2**64 - 5})
    assert s == [-5]
    nodefault = attnc.compile(SDPA.replace("scale : f32 = 0.125", "scale : f32"),
                              arch="sm_90a", cache_dir=cache_dir).sdpa
    with pytest.raises(TypeError, match="needs the scalar 'scale', which has no default"):
        nodefault._arguments((1, 2, 3, 4), {})


def test_a_graph_without_backward_refuses_inputs_that_need_grad(cache_dir):
    import torch
    plain = attnc.compile(FWD_ONLY, arch="sm_90a", cache_dir=cache_dir).plain
    q = meta(1, 2, 16, 128, grad=True)
    doc = torch.zeros(1, 16, dtype=torch.int32, device="meta")
    with pytest.raises(RuntimeError, match="has no backward: graph 'plain' declares no grad"):
        plain(q, q, q, doc)
    with torch.no_grad():
        assert plain(q, q, q, doc).shape == q.shape


def test_mla_head_dims_and_a_learnable_sink(root, cache_dir):
    """Head dims other than 64/128/256 (MLA's 192 for q.k, 128 for v) and a
    sink declared with grad: the shapes of o and of every gradient, sinks'
    included, come from the inputs."""
    import torch
    mla = attnc.compile(os.path.join(root, "examples", "mla.attn"), arch="sm_90a", cache_dir=cache_dir).mla
    q, k, v = meta(2, 4, 33, 192, grad=True), meta(2, 4, 70, 192, grad=True), meta(2, 4, 70, 128, grad=True)
    o, lse = mla(q, k, v)
    assert o.shape == (2, 4, 33, 128) and lse.shape == (2, 4, 33)
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    sinks = attnc.compile(os.path.join(root, "examples", "backward_sinks.attn"), arch="sm_90a",
                          cache_dir=cache_dir).backward_sinks
    q, k, v = meta(2, 8, 33, 64, grad=True), meta(2, 2, 70, 64), meta(2, 2, 70, 64)
    s = torch.randn(8, device="meta", dtype=torch.float32).requires_grad_()
    o, _ = sinks(q, k, v, s)
    o.sum().backward()
    assert s.grad.shape == (8,) and s.grad.dtype == torch.float32 and q.grad.shape == q.shape


def test_fp8_graphs_take_and_give_float8_tensors(root, cache_dir):
    import torch
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    g = attnc.compile(os.path.join(root, "examples", "fp8_full.attn"), arch="sm_90a",
                      cache_dir=cache_dir).fp8_full
    assert not g.has_backward
    f8 = torch.float8_e4m3fn
    q, k, v = (torch.empty(2, 4, 100, 128, device="meta", dtype=f8) for _ in range(3))
    o, amax = g(q, k, v, scale_s=448.0, scale_o=2.0)
    assert o.shape == (2, 4, 100, 128) and o.dtype == f8
    assert amax.shape == (1,) and amax.dtype == torch.float32


def test_packed_sequences_give_packed_outputs(root, cache_dir):
    """examples/packed.attn: q, k, v [tokens, heads, D] with i32 offsets; o is packed like q and
    lse is [heads, tokens]; the graphs without grad have no backward."""
    import torch
    m = attnc.compile(os.path.join(root, "examples", "packed.attn"), arch="sm_90a",
                      cache_dir=cache_dir)
    g = m.packed
    assert not g.has_backward
    q, k, v = meta(300, 8, 128), meta(420, 2, 128), meta(420, 2, 128)
    cu_q = torch.empty(5, device="meta", dtype=torch.int32)
    cu_k = torch.empty(5, device="meta", dtype=torch.int32)
    o, lse = g(q, k, v, cu_q, cu_k)
    assert o.shape == (300, 8, 128) and o.dtype == torch.bfloat16
    assert lse.shape == (8, 300) and lse.dtype == torch.float32
    out = m.packed_causal(q, k, v, cu_q, cu_k)
    o = out[0] if isinstance(out, (tuple, list)) else out
    assert o.shape == (300, 8, 128)


def test_packed_training_gives_packed_gradients(root, cache_dir):
    """examples/packed.attn's packed_train declares grad: its gradients are packed like the token
    tensors they belong to (the offsets get none)."""
    import torch
    m = attnc.compile(os.path.join(root, "examples", "packed.attn"), arch="sm_90a",
                      cache_dir=cache_dir)
    g = m.packed_train
    assert g.has_backward
    q, k, v = meta(300, 8, 128, grad=True), meta(300, 2, 128, grad=True), meta(300, 2, 128, grad=True)
    cu = torch.empty(5, device="meta", dtype=torch.int32)
    o, lse = g(q, k, v, cu)
    assert o.shape == (300, 8, 128) and o.requires_grad and lse.shape == (8, 300)
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_packed_tokens_against_paged_caches(root, cache_dir):
    """examples/paged_kv.attn's paged_kv_ragged: q [tokens, heads, D] by B + 1 offsets against
    paged caches with B table rows; o is packed like q, lse [heads, tokens]; no backward."""
    import torch
    g = attnc.compile(os.path.join(root, "examples", "paged_kv.attn"), arch="sm_90a",
                      cache_dir=cache_dir).paged_kv_ragged
    assert not g.has_backward
    q = meta(700, 32, 128)
    cu_q = torch.empty(5, device="meta", dtype=torch.int32)
    kc, vc = meta(300, 16, 8, 128), meta(300, 16, 8, 128)
    table = torch.empty(4, 75, device="meta", dtype=torch.int32)
    kv_len = torch.empty(4, device="meta", dtype=torch.int32)
    o, lse = g(q, cu_q, kc, vc, table, kv_len)
    assert o.shape == (700, 32, 128) and o.dtype == torch.bfloat16
    assert lse.shape == (32, 700) and lse.dtype == torch.float32


def test_fp8_training_gradients_take_the_grad_blocks_types(root, cache_dir):
    """examples/fp8_train.attn: FP8 q, k, v with a grad block; the backward's gradients come back
    in the block's storage types (dq, dk e4m3, dv bf16), its amax outputs go to scratch."""
    import torch
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this PyTorch has no float8_e4m3fn")
    g = attnc.compile(os.path.join(root, "examples", "fp8_train.attn"), arch="sm_90a",
                      cache_dir=cache_dir).fp8_train
    assert g.has_backward
    f8 = torch.float8_e4m3fn
    q, k, v = (torch.empty(2, 4, 100, 128, device="meta", dtype=f8) for _ in range(3))
    grads = g.fake_backward([q, k, v])
    assert [t.dtype for t in grads] == [f8, f8, torch.bfloat16]
    assert all(t.shape == (2, 4, 100, 128) for t in grads)
    plan = g._launch_plan()
    assert plan["amax"] == [b"amax_dp", b"amax_dq", b"amax_dk", b"amax_dv"]
    assert g.last_backward_amax == {}
