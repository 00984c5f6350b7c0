"""The tests run against the package in this checkout (python/attnc) and the
libattn.so beside it in build/ unless ATTN_LIBRARY says otherwise; kernels
go to one cache directory per test session."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
if "ATTN_LIBRARY" not in os.environ and os.path.exists(os.path.join(ROOT, "build", "libattn.so")):
    os.environ["ATTN_LIBRARY"] = os.path.join(ROOT, "build", "libattn.so")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("attnc-cache"))


@pytest.fixture(scope="session")
def root():
    return ROOT


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def have_gpu():
    if not have_torch():
        return False
    import torch
    return torch.cuda.is_available()


needs_torch = pytest.mark.skipif(not have_torch(), reason="PyTorch is not installed")
needs_gpu = pytest.mark.skipif(not have_gpu(), reason="no CUDA GPU here: the GPU tests skip")
