"""Where the CUDA headers that kernels include come from.

Two header sets are needed: CCCL (``cub/block/block_reduce.cuh``) and the CUDA
runtime headers (``cuda_bf16.h``, ``cuda_fp16.h``). They are looked up, in order,
through ``cuda.pathfinder`` (pip wheels ``nvidia-cuda-cccl`` / ``nvidia-cuda-runtime``,
conda), then ``$CUDA_HOME`` / ``$CUDA_PATH``, then ``/usr/local/cuda``. Each
candidate directory must actually hold a marker header to be accepted.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from .errors import HeaderNotFoundError

# name -> (pathfinder name, marker header relative to the directory, subdirectory
# under a toolkit's include/, the pip package that provides it)
_HEADER_SETS = {
    "cccl": ("cccl", "cub/block/block_reduce.cuh", "cccl", "nvidia-cuda-cccl"),
    "cudart": ("cudart", "cuda_bf16.h", "", "nvidia-cuda-runtime"),
}


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


def _toolkit_roots() -> list[str]:
    roots = [os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")]
    roots.append("/usr/local/cuda")
    return [r for r in roots if r]


@functools.lru_cache(maxsize=None)
def find(name: str) -> Path:
    """Directory holding header set ``name`` ('cccl' or 'cudart'); HeaderNotFoundError otherwise."""
    pf_name, marker, subdir, package = _HEADER_SETS[name]
    looked: list[str] = []
    candidates: list[tuple[str, str | None]] = [("cuda.pathfinder", _pathfinder_dir(pf_name))]
    for root in _toolkit_roots():
        candidates.append((root, str(Path(root, "include", subdir)) if subdir else str(Path(root, "include"))))
        # CUDA 13 toolkits also keep CCCL directly under include/ in some layouts.
        if subdir:
            candidates.append((root, str(Path(root, "include"))))
    for origin, directory in candidates:
        if directory is None:
            looked.append(f"{origin} (found nothing)")
            continue
        if Path(directory, marker).is_file():
            return Path(directory)
        looked.append(f"{directory} (no {marker})")
    raise HeaderNotFoundError(
        f"CUDA headers '{name}' ({marker}) not found; looked in: " + "; ".join(looked)
        + f". Install them with `pip install {package}`, or set CUDA_HOME to a CUDA toolkit."
    )


def include_dirs() -> list[Path]:
    """All include directories the kernels need, CCCL first."""
    return [find("cccl"), find("cudart")]
