"""FlashInfer's norm kernels built by tools/flashinfer_ext, as the benchmark finds and calls them, without a GPU: where
it looks, the signatures it gives them (flashinfer.norm's), and the FlashInfer implementations falling back on it
where the flashinfer package is not importable."""
import inspect
import sys
import types

import pytest

from pyrms.bench import flashinfer_ext, torch_impls
from pyrms.bench.impls import Context, Unavailable


def test_it_looks_where_the_environment_says_else_in_the_default_directory(monkeypatch, tmp_path):
    monkeypatch.delenv(flashinfer_ext.ENV, raising=False)
    assert flashinfer_ext.build_dir() == flashinfer_ext.DEFAULT_DIR
    monkeypatch.setenv(flashinfer_ext.ENV, str(tmp_path))
    assert flashinfer_ext.build_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match=f"no {flashinfer_ext.MODULE}\\*.so in {tmp_path}.*{flashinfer_ext.ENV}"):
        flashinfer_ext.find(tmp_path)
    (tmp_path / f"{flashinfer_ext.MODULE}.so").write_bytes(b"")
    assert flashinfer_ext.find(tmp_path) == tmp_path / f"{flashinfer_ext.MODULE}.so"


class FakeExt:
    def __init__(self):
        self.calls = []

    def rmsnorm(self, *args):
        self.calls.append(("rmsnorm", *args))

    def fused_add_rmsnorm(self, *args):
        self.calls.append(("fused_add_rmsnorm", *args))


def test_the_functions_have_flashinfers_signatures_and_call_the_extension():
    ext = FakeExt()
    torch = types.SimpleNamespace(empty_like=lambda x: ("empty like", x))
    norm = flashinfer_ext.Norm(ext, torch, "where")
    for name in ("rmsnorm", "fused_add_rmsnorm"):  # what torch_impls.flashinfer_function asks of flashinfer.norm's
        assert "enable_pdl" in inspect.signature(getattr(norm, name)).parameters
    assert norm.rmsnorm("x", "w", 1e-5, out="y", enable_pdl=True) == "y"
    assert norm.rmsnorm("x", "w") == ("empty like", "x")
    assert norm.fused_add_rmsnorm("x", "r", "w", 1e-6, enable_pdl=1) is None
    assert ext.calls == [("rmsnorm", "y", "x", "w", 1e-5, True), ("rmsnorm", ("empty like", "x"), "x", "w", 1e-6, False),
                         ("fused_add_rmsnorm", "x", "r", "w", 1e-6, True)]


def without_flashinfer(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer raises ImportError


def test_without_the_package_the_flashinfer_impls_use_the_extension_and_say_so(monkeypatch, tmp_path):
    without_flashinfer(monkeypatch)
    norm = flashinfer_ext.Norm(FakeExt(), None, tmp_path / "x.so")
    seen = []
    monkeypatch.setattr(flashinfer_ext, "load", lambda torch: seen.append(torch) or norm)
    ctx = Context(stream=0, epsilon=1e-6, torch="the torch module")
    notes = []
    fn = torch_impls.flashinfer_function(ctx, "fused_add_rmsnorm", notes)
    assert fn == norm.fused_add_rmsnorm and seen == ["the torch module"]
    assert notes == [f"{torch_impls.FLASHINFER_EXT_NOTE} ({tmp_path / 'x.so'})"]
    assert torch_impls.flashinfer_function(ctx, "rmsnorm") == norm.rmsnorm  # notes are optional


def test_with_neither_the_package_nor_the_extension_the_reason_names_both(monkeypatch, tmp_path):
    without_flashinfer(monkeypatch)
    monkeypatch.setenv(flashinfer_ext.ENV, str(tmp_path))
    ctx = Context(stream=0, epsilon=1e-6, torch="the torch module")
    with pytest.raises(Unavailable) as info:
        torch_impls.flashinfer_function(ctx, "rmsnorm", [])
    text = str(info.value)
    assert text.startswith("FlashInfer is not importable: ")
    assert f"nor is FlashInfer's norm.cuh built by tools/flashinfer_ext: no {flashinfer_ext.MODULE}*.so in {tmp_path}" in text
    with pytest.raises(Unavailable, match="no torch"):
        torch_impls.flashinfer_function(Context(stream=0, epsilon=1e-6, torch_reason="no torch"), "rmsnorm")
