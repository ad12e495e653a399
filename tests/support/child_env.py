"""The environment of a child Python that a test starts: this checkout first on PYTHONPATH, anything already
there kept after it (a CUDA 12 run puts its cuda-bindings and NVRTC there: tools/cuda12_gpu.sh), then the
given variables."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout


def child_env(**variables: str) -> dict[str, str]:
    """os.environ with the checkout first on PYTHONPATH, updated with ``variables``."""
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **variables}
