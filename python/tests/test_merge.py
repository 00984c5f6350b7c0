"""attnc.merge_partials (python/attnc/_merge.py) on the CPU: key shards of a float64 attention
merged equal the whole, rows without keys give O 0 and lse -inf, and gradients flow (gradcheck),
0 and not NaN at such rows."""
import math

import pytest

torch = pytest.importorskip("torch")
import attnc  # noqa: E402


def attention(q, k, v, keep):
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.where(keep, torch.exp(s - torch.where(torch.isinf(lse), 0, lse).unsqueeze(-1)), 0.0)
    return p @ v, lse


def shards(q, k, v, keep, cuts):
    return [attention(q, k[..., a:b, :], v[..., a:b, :], keep[..., a:b]) for a, b in
            zip(cuts, cuts[1:])]


def test_merged_shards_equal_the_whole():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g, dtype=torch.float64) for _ in range(3))
    i = torch.arange(40)[:, None]
    j = torch.arange(40)[None, :]
    keep = (j <= i) & (i - j < 13)  # causal window: some rows reach only some shards
    keep = keep.expand(2, 3, 40, 40).clone()
    keep[0, 1, 5] = False            # a row with no key at all
    o_full, lse_full = attention(q, k, v, keep)
    for cuts in ([0, 17, 40], [0, 8, 21, 33, 40]):
        parts = shards(q, k, v, keep, cuts)
        o, lse = attnc.merge_partials([p[0] for p in parts], [p[1] for p in parts])
        assert torch.allclose(o, o_full, atol=1e-12, rtol=0)
        assert torch.equal(torch.isinf(lse), torch.isinf(lse_full))
        fin = torch.isfinite(lse_full)
        assert torch.allclose(lse[fin], lse_full[fin], atol=1e-12, rtol=0)
        assert torch.all(o[0, 1, 5] == 0) and lse[0, 1, 5] == float("-inf")


def test_gradients_flow_and_stay_finite():
    g = torch.Generator().manual_seed(1)
    n, S, D = 3, 6, 4
    outs = [torch.randn(S, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    lses = [torch.randn(S, generator=g, dtype=torch.float64) for _ in range(n)]
    lses[1][2] = float("-inf")          # a part without keys at row 2
    for x in lses:
        x[4] = float("-inf")            # row 4: no part reaches it
    lses = [x.requires_grad_(True) for x in lses]
    o, lse = attnc.merge_partials(outs, lses)
    (o.sum() + torch.where(torch.isinf(lse), 0, lse).sum()).backward()
    for t in outs + lses:
        assert torch.all(torch.isfinite(t.grad))
    assert torch.all(outs[0].grad[4] == 0)

    def f(*xs):
        o, lse = attnc.merge_partials(xs[:n], xs[n:])
        return o, torch.where(torch.isinf(lse), 0, lse)
    fin = [torch.randn(S, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    fl = [torch.randn(S, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    assert torch.autograd.gradcheck(f, tuple(fin + fl))


def test_shapes_are_checked():
    with pytest.raises(ValueError):
        attnc.merge_partials([torch.zeros(2, 3)], [])
    with pytest.raises(ValueError):
        attnc.merge_partials([torch.zeros(2, 3)], [torch.zeros(3)])
