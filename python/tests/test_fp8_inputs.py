"""attnc.hadamard and attnc.quantize_fp8 (python/attnc/_fp8.py) on the CPU: the rotation is
orthogonal and leaves q k^T unchanged, block-diagonal where the head dim is not a power of two;
quantizing maps the largest |x| to the largest FP8 value and rounds to nearest."""
import pytest

torch = pytest.importorskip("torch")
import attnc  # noqa: E402

if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("this PyTorch has no float8_e4m3fn", allow_module_level=True)


@pytest.mark.parametrize("d", [64, 96, 128, 80])
def test_hadamard_is_orthogonal_and_keeps_the_scores(d):
    h = attnc.hadamard(d, dtype=torch.float64)
    assert torch.allclose(h @ h.T, torch.eye(d, dtype=torch.float64), atol=1e-12)
    n = d & -d  # blocks of the largest power of two dividing d
    assert torch.count_nonzero(h) == d * n
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(5, 7, d, generator=g, dtype=torch.float64) for _ in range(2))
    assert torch.allclose((q @ h) @ (k @ h).transpose(-1, -2), q @ k.transpose(-1, -2), atol=1e-10)


def test_hadamard_spreads_a_channel_outlier():
    x = torch.zeros(1, 128, dtype=torch.float64)
    x[0, 5] = 100.0
    y = x @ attnc.hadamard(128, dtype=torch.float64)
    assert torch.allclose(y.abs(), torch.full_like(y, 100.0 / 128 ** 0.5))


@pytest.mark.parametrize("dt,top", [("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_quantize_fp8_scales_to_the_largest_value(dt, top):
    dtype = getattr(torch, dt)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(300, 64, generator=g) * 3
    x8, descale = attnc.quantize_fp8(x, dtype)
    assert x8.dtype == dtype
    assert descale == pytest.approx(float(x.abs().max()) / top)
    assert float(x8.float().abs().max()) == top
    # round to nearest: within half an FP8 step (relative 2^-4 for e4m3, 2^-3 for e5m2)
    rel = 2.0 ** -4 if dt == "float8_e4m3fn" else 2.0 ** -3
    back = x8.float() * descale
    big = x.abs() > 0.05 * float(x.abs().max())
    assert ((back - x).abs()[big] <= rel * x.abs()[big] + 1e-6).all()


def test_quantize_fp8_zeros_and_given_amax():
    x8, descale = attnc.quantize_fp8(torch.zeros(4, 8))
    assert descale == 1.0 and not x8.float().any()
    x8, descale = attnc.quantize_fp8(torch.full((2, 2), 1000.0), amax=448.0)
    assert descale == 1.0 and (x8.float() == 448.0).all()  # saturates, as satfinite does
