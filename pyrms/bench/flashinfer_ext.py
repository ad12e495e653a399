"""FlashInfer's norm kernels without the flashinfer package: the PyTorch extension that ``python -m
tools.flashinfer_ext.build`` compiles from FlashInfer's header-only ``include/flashinfer/norm.cuh``, loaded from
where it was built, behind the signatures of ``flashinfer.norm``'s functions that the benchmark calls.

Where it is: the directory ``PYRMS_FLASHINFER_EXT`` names, else ``build/flashinfer_ext`` under the current
directory (the builder's default). Its kernels launch on PyTorch's current stream, as FlashInfer's own do.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path

MODULE = "pyrms_flashinfer_norm"  # the extension's name (torch.utils.cpp_extension.load names its file after it)
ENV = "PYRMS_FLASHINFER_EXT"
DEFAULT_DIR = Path("build") / "flashinfer_ext"


def build_dir() -> Path:
    """Where the extension is built and looked for: ``$PYRMS_FLASHINFER_EXT``, else DEFAULT_DIR."""
    return Path(os.environ.get(ENV) or DEFAULT_DIR)


def find(directory: Path) -> Path:
    """The extension's shared library in ``directory``; FileNotFoundError saying where it looked."""
    found = sorted(Path(directory).glob(f"{MODULE}*.so"))
    if not found:
        raise FileNotFoundError(f"no {MODULE}*.so in {directory} (build it with python -m tools.flashinfer_ext.build, "
                                f"or name its directory in {ENV})")
    return found[0]


class Norm:
    """``rmsnorm`` and ``fused_add_rmsnorm`` with flashinfer.norm's signatures, on the built extension ``ext``."""

    def __init__(self, ext, torch, path: Path):
        self._ext, self._torch, self.path = ext, torch, path

    def rmsnorm(self, input, weight, eps: float = 1e-6, out=None, enable_pdl: bool = False):
        """``out`` = RMSNorm(input) * weight over the last dimension of the [rows, hidden] ``input``."""
        if out is None:
            out = self._torch.empty_like(input)
        self._ext.rmsnorm(out, input, weight, float(eps), bool(enable_pdl))
        return out

    def fused_add_rmsnorm(self, input, residual, weight, eps: float = 1e-6, enable_pdl: bool = False) -> None:
        """In place: ``residual`` += ``input``, then ``input`` = RMSNorm(residual) * weight."""
        self._ext.fused_add_rmsnorm(input, residual, weight, float(eps), bool(enable_pdl))


def load(torch, directory: Path | None = None) -> Norm:
    """The built extension of ``directory`` (default ``build_dir()``) as a Norm; FileNotFoundError where it is
    not built, ImportError where it does not load. Imports PyTorch's libraries first (``torch``: the module),
    which the extension links."""
    path = find(build_dir() if directory is None else directory).resolve()
    if path not in _LOADED:
        _LOADED[path] = Norm(_import(path), torch, path)
    return _LOADED[path]


_LOADED: dict[Path, Norm] = {}


def _import(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    ext = importlib.util.module_from_spec(spec)
    loader.exec_module(ext)
    return ext
