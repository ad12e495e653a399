"""Where the CUDA headers that kernels include come from.

Two header sets are needed: CCCL (``cub/block/block_reduce.cuh``) and the CUDA
runtime headers (``cuda_bf16.h``, ``cuda_fp16.h``), both of the CUDA major version
of the NVRTC that compiles (CUDA 13's ``cuda_fp8.hpp`` does not parse with NVRTC 12).
They are looked up, in order, in the pip wheels of that major on ``sys.path``
(``pyrms-cuda[cu12]`` or ``[cu13]``; an environment may hold both majors' wheels),
through ``cuda.pathfinder`` (conda, and wheels in another layout), then
``$CUDA_HOME`` / ``$CUDA_PATH``, then ``/usr/local/cuda``. Each candidate directory
must hold a marker header, and headers of the major wanted, to be accepted.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

from .errors import HeaderNotFoundError

# name -> (pathfinder name, marker header relative to the directory, subdirectory
# under a toolkit's include/, the header that tells the CUDA major, its version macro)
_HEADER_SETS = {
    "cccl": ("cccl", "cub/block/block_reduce.cuh", "cccl", "cub/version.cuh", "CUB_VERSION"),
    "cudart": ("cudart", "cuda_bf16.h", "", "cuda_runtime_api.h", "CUDART_VERSION"),
}

# Each major's pip wheels: name -> include directory relative to a sys.path entry. pathfinder searches only
# the site-packages directories, in a fixed order of layouts (CUDA 13's first), and pyrms needs the major of
# its NVRTC, found where Python finds modules (PYTHONPATH and --target installs included).
_WHEEL_DIRS = {
    12: {"cccl": "nvidia/cuda_cccl/include", "cudart": "nvidia/cuda_runtime/include"},
    13: {"cccl": "nvidia/cu13/include/cccl", "cudart": "nvidia/cu13/include"},
}

# The extra that installs each major's headers, for the message when none are found.
_EXTRAS = {12: "pyrms-cuda[cu12]", 13: "pyrms-cuda[cu13]"}


def _pathfinder_dir(name: str) -> str | None:
    try:
        from cuda import pathfinder
    except ImportError:
        return None
    for fn_name in ("find_nvidia_header_directory", "locate_nvidia_header_directory"):
        fn = getattr(pathfinder, fn_name, None)
        if fn is None:
            continue
        try:
            found = fn(name)
        except Exception:  # unknown name on an older pathfinder, or not installed
            return None
        if found is None:
            return None
        return str(getattr(found, "abs_path", found))
    return None


def _site_dirs() -> list[str]:
    """Where Python finds modules, hence pip's wheels: sys.path, in its order."""
    return [entry for entry in sys.path if entry]


def _toolkit_roots() -> list[str]:
    roots = [os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")]
    roots.append("/usr/local/cuda")
    return [r for r in roots if r]


def _header_major(name: str, directory: Path) -> int | None:
    """The CUDA major version of header set ``name`` in ``directory``, None if it does not say.

    The runtime headers give CUDART_VERSION (12000 for 12.0); CCCL's CUB_VERSION is MMMmmmpp, and its major
    is 2 in every CUDA 12 (CUB 2.0 in 12.0 to CCCL 2.8 in 12.9) and 3 in CUDA 13, ten below CUDA's."""
    _, _, _, version_header, macro = _HEADER_SETS[name]
    try:
        text = Path(directory, version_header).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(rf"^\s*#\s*define\s+{macro}\s+(\d+)", text, re.MULTILINE)
    if match is None:
        return None
    version = int(match.group(1))
    return version // 1000 if name == "cudart" else version // 100000 + 10


@functools.lru_cache(maxsize=None)
def find(name: str, major: int) -> Path:
    """Directory holding header set ``name`` ('cccl' or 'cudart') of CUDA ``major`` (NVRTC's:
    ``compiler.nvrtc_version()[0]``); HeaderNotFoundError naming every place looked otherwise."""
    pf_name, marker, subdir, _, _ = _HEADER_SETS[name]
    looked: list[str] = []
    wheel_dir = _WHEEL_DIRS.get(major, {}).get(name)
    candidates: list[tuple[str, str | None]] = []
    if wheel_dir is not None:
        candidates += [("sys.path", str(Path(entry, wheel_dir))) for entry in _site_dirs()
                       if Path(entry, wheel_dir).is_dir()]
    candidates.append(("cuda.pathfinder", _pathfinder_dir(pf_name)))
    for root in _toolkit_roots():
        candidates.append((root, str(Path(root, "include", subdir)) if subdir else str(Path(root, "include"))))
        # CUDA 13 toolkits also keep CCCL directly under include/ in some layouts.
        if subdir:
            candidates.append((root, str(Path(root, "include"))))
    for origin, directory in candidates:
        if directory is None:
            looked.append(f"{origin} (found nothing)")
            continue
        if not Path(directory, marker).is_file():
            looked.append(f"{directory} (no {marker})")
            continue
        found_major = _header_major(name, Path(directory))
        if found_major == major:
            return Path(directory)
        looked.append(f"{directory} (CUDA {found_major if found_major is not None else 'unknown'}'s, not {major}'s)")
    install = f"`pip install {_EXTRAS[major]}`" if major in _EXTRAS else f"the CUDA {major} headers"
    raise HeaderNotFoundError(
        f"CUDA headers '{name}' ({marker}) not found; looked in: " + "; ".join(looked)
        + f". NVRTC is CUDA {major}'s, and needs headers of CUDA {major}: install them with {install}, "
        f"or set CUDA_HOME to a CUDA {major} toolkit."
    )


def include_dirs(major: int) -> list[Path]:
    """All include directories the kernels need for an NVRTC of CUDA ``major``, CCCL first."""
    return [find("cccl", major), find("cudart", major)]
