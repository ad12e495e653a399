"""Which headers the build needs, and where they are: FlashInfer's own (``flashinfer/norm.cuh`` and what it
includes in quotes, transitively) and the CUDA libraries' that it includes in angle brackets but the CUDA
toolkit may lack (pip's CUDA packages carry cuBLAS's and cuRAND's headers, ``site-packages/nvidia/*/include``).

Run ``python -m tools.flashinfer_ext.headers SRC DEST`` to copy the FlashInfer headers norm.cuh needs from a
FlashInfer checkout's ``include`` directory SRC to DEST (the directory the builder's ``--include`` names).
"""
from __future__ import annotations

import argparse
import posixpath
import re
import shutil
import sys
from pathlib import Path

ROOT_HEADER = "flashinfer/norm.cuh"
# Included in angle brackets by FlashInfer's trtllm headers (reached from norm.cuh), but not part of the CUDA
# toolkit's own include directory in every install.
LIBRARY_HEADERS = ("cublas_v2.h", "cublasLt.h", "curand_kernel.h")
_QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def flashinfer_headers(include: Path, root: str = ROOT_HEADER) -> tuple[list[str], list[str]]:
    """(found, missing): the headers under ``include`` that ``root`` needs, transitively through its quoted
    includes (each looked for beside the header that includes it, then under ``include``), as paths relative to
    ``include``; and each quoted include found in neither place, as ``NAME (from INCLUDER)``. Every
    ``#include "..."`` counts, conditional or not, but for a line commented out by ``//`` at its start."""
    include = Path(include)
    found: set[str] = set()
    missing: set[str] = set()
    todo = [(root, None)]
    while todo:
        name, includer = todo.pop()
        beside = posixpath.normpath(posixpath.join(posixpath.dirname(includer or ""), name))
        header = next((h for h in (beside, posixpath.normpath(name)) if (include / h).is_file()), None)
        if header is None:
            missing.add(name if includer is None else f"{name} (from {includer})")
        elif header not in found:
            found.add(header)
            todo += [(quoted, header) for quoted in _QUOTED.findall((include / header).read_text(errors="replace"))]
    return sorted(found), sorted(missing)


def library_include_dirs(cuda_include: Path, search_roots, headers=LIBRARY_HEADERS) -> list[Path]:
    """Directories to add to the include path for each of ``headers`` that ``cuda_include`` (the toolkit's)
    lacks: the first ``<root>/nvidia/*/include`` holding it, for each root of ``search_roots`` (the
    site-packages directories) in turn. A header found nowhere adds nothing (the compiler names it)."""
    dirs: list[Path] = []
    for header in headers:
        if (Path(cuda_include) / header).is_file():
            continue
        for root in search_roots:
            hit = next((d for d in sorted(Path(root).glob("nvidia/*/include")) if (d / header).is_file()), None)
            if hit is not None:
                if hit not in dirs:
                    dirs.append(hit)
                break
    return dirs


def copy_headers(source: Path, dest: Path) -> list[str]:
    """Copy the FlashInfer headers norm.cuh needs from ``source`` to ``dest``; ValueError naming any missing."""
    found, missing = flashinfer_headers(source)
    if missing:
        raise ValueError(f"{source} lacks headers norm.cuh includes: {', '.join(missing)}")
    for header in found:
        target = Path(dest) / header
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(source) / header, target)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.flashinfer_ext.headers",
                                     description="Copy the FlashInfer headers norm.cuh needs (transitively).")
    parser.add_argument("source", type=Path, help="a FlashInfer checkout's include directory")
    parser.add_argument("dest", type=Path, help="where to copy them (the builder's --include)")
    args = parser.parse_args(argv)
    try:
        copied = copy_headers(args.source, args.dest)
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(copied))
    return 0


if __name__ == "__main__":
    sys.exit(main())
