"""tools/flashinfer_ext's extension on a real GPU, where it has been built (python -m tools.flashinfer_ext.build
--include DIR; skipped otherwise): each function, with and without PDL, against PyTorch's RMSNorm."""
import re

import pytest

from pyrms.bench import flashinfer_ext

pytestmark = pytest.mark.gpu


def test_the_built_extension_matches_pytorch():
    pytest.importorskip("torch")
    from tools.flashinfer_ext import build

    try:
        flashinfer_ext.find(flashinfer_ext.build_dir())
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    lines = build.check(flashinfer_ext.build_dir())
    errors = [float(re.search(r"relative error ([0-9.e+-]+)", line).group(1)) for line in lines]
    assert len(lines) == 4 and max(errors) < 1e-2, lines
    assert all("exact" in line for line in lines if line.startswith("fused_add")), lines
