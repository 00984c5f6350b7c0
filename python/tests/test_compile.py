"""Compiling, signatures and refusals: no GPU and no torch needed (NVRTC
compiles for a named target)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attnc

SDPA = """
attention sdpa {
  input  q : bf16[B, H, Sq, 64];
  input  k : bf16[B, Hk, Skv, 64];
  input  v : bf16[B, Hk, Skv, 64];
  input  bias : f32[1, H, Sq, Skv];
  scalar scale : f32 = 0.125;
  scalar window : i32 = 128;
  s = mask((q @ k^T) * scale + bias[0, h, i, j], j <= i && i - j < window);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 64];
  output lse = logsumexp(s);
  grad q, k, v;
}
"""


def test_the_versions_agree(root):
    header = Path(root, "compiler", "attnc.h").read_text()
    c_version = re.search(r'#define ATTNC_VERSION "([^"]+)"', header).group(1)
    pyproject = Path(root, "python", "pyproject.toml").read_text()
    py_version = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    assert attnc.__version__ == py_version == c_version == attnc.library_version()


def test_compile_text_gives_the_signature(cache_dir):
    mod = attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir)
    assert mod.arch == "sm_90a"
    g = mod.sdpa
    assert g is mod["sdpa"] is mod.graphs["sdpa"]
    assert [t.name for t in g.inputs] == ["q", "k", "v", "bias"]
    assert [t.operand for t in g.inputs] == ["q", "k", "v", None]
    assert g.inputs[3].dims == (1, "H", "Sq", "Skv")
    assert [(t.name, t.dtype, t.dims) for t in g.outputs] == [
        ("o", "bf16", ("B", "H", "Sq", 64)), ("lse", "f32", ("B", "H", "Sq"))]
    assert g.outputs[0].attention_output and g.outputs[1].lse
    assert [(s.name, s.dtype, s.default) for s in g.scalars] == [
        ("scale", "f32", 0.125), ("window", "i32", 128)]
    assert g.has_backward
    grads = g.raw.by_role("grad_output")
    assert [t.name for t in grads] == ["dq", "dk", "dv"]
    assert [t.of for t in grads] == [0, 1, 2]
    assert g.raw.by_role("grad_input")[0].name == "do"
    assert "sdpa(q: bf16[B, H, Sq, 64]" in repr(g)
    # The same arguments: the same module, compiled once.
    assert attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir) is mod


def test_prepare_compiles_the_deferred_programs_into_the_cache(tmp_path):
    # A graph with grad: its forward now; its decode kernels and backward
    # on their first launches, or at prepare().
    mod = attnc.compile(SDPA, name="prep.attn", arch="sm_90a", cache_dir=str(tmp_path))
    before = sorted(tmp_path.rglob("*.bin"))
    assert len(before) == 1
    assert mod.prepare() is mod
    after = sorted(tmp_path.rglob("*.bin"))
    assert len(after) == 3 and set(before) < set(after)
    mod.prepare()  # (already there: nothing more)
    assert sorted(tmp_path.rglob("*.bin")) == after


def test_compile_a_file_by_path(root, cache_dir):
    path = Path(root, "examples", "gqa.attn")
    mod = attnc.compile(path, arch="sm_80", cache_dir=cache_dir)
    assert mod.arch == "sm_80"
    assert list(mod.graphs) == ["gqa"]
    assert mod.gqa.inputs[1].dims == ("B", 8, "Skv", 128)
    assert not mod.gqa.has_backward
    assert "declares no grad" in mod.gqa.raw.no_backward_reason
    assert attnc.compile(str(path), arch="sm_80", cache_dir=cache_dir) is not None


def test_a_source_error_carries_the_located_diagnostic(cache_dir):
    bad = "attention g {\n  input q : bf16[B, H, S, 64];\n  o = softmax(q @ kk^T) @ q;\n}\n"
    with pytest.raises(attnc.SourceError) as e:
        attnc.compile(bad, name="bad.attn", arch="sm_90a", cache_dir=cache_dir)
    msg = str(e.value)
    assert re.search(r"bad\.attn:3:\d+: error", msg), msg
    assert "  o = softmax(q @ kk^T) @ q;" in msg
    assert re.search(r"^\s*\|\s*\^", msg, re.M), msg
    assert e.value.status == 3 and e.value.status_name == "ATTN_ERROR_SOURCE"


def test_a_graph_no_kernel_runs_is_refused_with_a_reason(root, cache_dir):
    # Checked, but no kernel scales P after rounding it.
    text = ("attention g {\n  input q : e4m3[B, H, S, 128];\n  input k : e4m3[B, H, S, 128];\n"
            "  input v : e4m3[B, H, S, 128];\n  p = softmax(q @ k^T);\n"
            "  o = (e4m3(p) * 2.0) @ v;\n  output o : bf16[B, H, S, 128];\n}\n")
    with pytest.raises(attnc.UnsupportedError) as e:
        attnc.compile(text, name="bad_p.attn", arch="sm_90a", cache_dir=cache_dir)
    assert "bad_p.attn:6:" in str(e.value) and "between the softmax and p @ v" in str(e.value)


def test_io_option_and_target_errors(cache_dir):
    with pytest.raises(attnc.AttnError, match="no_such.attn"):
        attnc.compile("no_such.attn", arch="sm_90a")
    with pytest.raises(ValueError, match="unknown option 'splits'"):
        attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir, options={"splits": 2})
    with pytest.raises(attnc.BindError, match="does not take 7"):
        attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir, options={"decode": 7})
    with pytest.raises(attnc.AttnError, match="sm_12"):
        attnc.compile(SDPA, arch="sm_12", cache_dir=cache_dir)


def test_options_attn_h_lists_are_taken_by_name(cache_dir):
    """Every option the package names reaches libattn (the C enum's values, _lib.OPTIONS), and
    a value it does not take is refused with the library's message."""
    opts = {"launch_overlap": 0, "exp2_fma": 3, "decode_splits": 3, "decode": 1,
            "sm90_variant": 0, "backward_template": 0, "persistent_ctas": 0}
    assert set(opts) == set(attnc._lib.OPTIONS)
    mod = attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir, options=opts)
    assert mod.arch == "sm_90a"
    for name, bad in (("launch_overlap", 2), ("exp2_fma", 6)):
        with pytest.raises(attnc.BindError, match=f"does not take {bad}"):
            attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir, options={name: bad})


def test_graph_lookup_errors_name_the_graphs(cache_dir):
    mod = attnc.compile(SDPA, arch="sm_90a", cache_dir=cache_dir)
    with pytest.raises(KeyError, match="sdpa"):
        mod["nope"]
    with pytest.raises(AttributeError, match="the module has sdpa"):
        mod.nope


def test_a_missing_library_is_named():
    code = "import attnc; attnc.compile('attention g {}', arch='sm_90a')"
    env = dict(os.environ, ATTN_LIBRARY="/nonexistent/libattn.so")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(attnc.__file__))))
    assert r.returncode != 0
    assert "libattn not found" in r.stderr and "/nonexistent/libattn.so" in r.stderr
