"""FP8 inputs for attnc's FP8 graphs (examples/fp8.attn, examples/fp8_full.attn): per-tensor
quantization with the descale factor the graphs take, and the Hadamard rotation that spreads
outliers across the head dimension before quantizing (FlashAttention-3's "incoherent
processing").

Rotating q and k by the same orthogonal matrix H along the head dimension leaves every score
unchanged, (q H)(k H)^T = q k^T, so the graph needs no change: only its FP8 inputs are
different. A few large channels (the outliers LLM activations have) then no longer set the
per-tensor scale that every other element is quantized with. v may be rotated too, O = (P (v H))
H^T, with the rotation undone on O (or folded into the next projection).
bench/fp8_hadamard_error.py measures what it does to the error.
"""
import math


def _torch():
    import torch
    return torch


def hadamard(d, *, dtype=None, device=None):
    """The d x d orthogonal Hadamard matrix, 1/sqrt(n) times Sylvester's +-1 matrix of the largest
    power of two n dividing d, repeated along the diagonal (d = 96: three blocks of 32)."""
    torch = _torch()
    if d < 1:
        raise ValueError(f"hadamard: the dimension must be positive, not {d}")
    n = d & -d
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = torch.block_diag(*([h / math.sqrt(n)] * (d // n)))
    return h.to(dtype=dtype or torch.float32, device=device)


def quantize_fp8(x, dtype=None, amax=None):
    """x as FP8 with one scale for the tensor: (x8, descale), x8 = x / descale rounded to nearest
    (saturating), descale = amax / the type's largest finite value (448 for e4m3, 57344 for e5m2),
    so that x8 * descale approximates x and the largest |x| maps to the largest FP8 value. amax
    defaults to max |x|; an all-zero x gets descale 1. The graphs take descale as a scalar
    (descale_q, descale_k, descale_v)."""
    torch = _torch()
    dtype = dtype or torch.float8_e4m3fn
    top = torch.finfo(dtype).max
    a = float(x.abs().max()) if amax is None else float(amax)
    descale = a / top if a > 0 and math.isfinite(a) else 1.0
    x8 = (x.float() / descale).clamp(-top, top).to(dtype)
    return x8, descale
