"""Build FlashInfer's norm kernels (its header-only ``include/flashinfer/norm.cuh``) as the PyTorch extension that
``python -m pyrms.bench`` times as its flashinfer and flashinfer_pdl implementations where the flashinfer package
is not importable (pyrms.bench.flashinfer_ext loads it):

    python -m tools.flashinfer_ext.build --include DIR

DIR: a directory holding ``flashinfer/norm.cuh`` and what it includes (``python -m tools.flashinfer_ext.headers``
copies them out of a FlashInfer checkout). Needs PyTorch with CUDA, nvcc and ninja; compiling needs no GPU, the
check after it (each function against PyTorch's RMSNorm) runs where there is one. TORCH_CUDA_ARCH_LIST picks the
architectures as for any PyTorch extension (default: the GPU's).
"""
from __future__ import annotations

import argparse
import site
import sys
from pathlib import Path

from pyrms.bench import flashinfer_ext

from . import headers

HERE = Path(__file__).resolve().parent
SOURCES = ("binding.cpp", "norm.cu")
# FlashInfer's own flags for its norm module (C++17, fast math, its dtype switches); and the half and bfloat16
# operators and conversions back, which PyTorch's extension flags take away and FlashInfer's headers use.
CUDA_FLAGS = ("-O3", "-std=c++17", "-use_fast_math", "-DENABLE_BF16", "-DENABLE_FP8", "-DFLASHINFER_ENABLE_F16",
              "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
              "-U__CUDA_NO_BFLOAT16_CONVERSIONS__")


def include_flags(include: Path, cuda_home: str | None, search_roots) -> tuple[list[str], list[str]]:
    """(include path, more nvcc flags): ``include`` (FlashInfer's headers, all that norm.cuh needs; ValueError
    naming any missing); and ``-isystem`` for each directory of the CUDA library headers that the toolkit at
    ``cuda_home`` lacks (headers.library_include_dirs), searched after the toolkit's own (those directories hold
    copies of toolkit headers too, which must not shadow the toolkit's)."""
    found, missing = headers.flashinfer_headers(include)
    if missing or not found:
        raise ValueError(f"{include} lacks FlashInfer headers norm.cuh needs: "
                         f"{', '.join(missing or [headers.ROOT_HEADER])}")
    toolkit = Path(cuda_home or "/usr/local/cuda") / "include"
    extra = [flag for d in headers.library_include_dirs(toolkit, search_roots) for flag in ("-isystem", str(d))]
    return [str(include)], extra


def build(include: Path, build_dir: Path, verbose: bool = False) -> Path:
    """Compile and load the extension into ``build_dir``; its shared library's path."""
    import torch
    from torch.utils import cpp_extension

    # PyTorch's own CUDA wheels (site-packages/nvidia/...) sit beside it; other site directories after it
    roots = dict.fromkeys([Path(torch.__file__).resolve().parents[1], *map(Path, site.getsitepackages())])
    paths, extra = include_flags(include, cpp_extension.CUDA_HOME, list(roots))
    build_dir.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name=flashinfer_ext.MODULE, sources=[str(HERE / s) for s in SOURCES], extra_include_paths=paths,
                       extra_cflags=["-O3"], extra_cuda_cflags=[*CUDA_FLAGS, *extra],
                       build_directory=str(build_dir), verbose=verbose)
    return flashinfer_ext.find(build_dir)


def check(build_dir: Path) -> list[str]:
    """Each function, with and without PDL, on random bf16 rows against PyTorch's RMSNorm in fp32: one line each
    with its relative error (the bench validates every shape it times; this says at once that the build works)."""
    import torch

    norm = flashinfer_ext.load(torch, build_dir)
    torch.manual_seed(0)
    x = torch.randn(5, 4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5

    def reference(rows):
        return torch.nn.functional.rms_norm(rows.float(), (rows.shape[-1],), w.float(), 1e-6)

    def error(got, want):
        return float((got.float() - want).norm() / want.norm())

    lines = []
    for pdl in (False, True):
        y = norm.rmsnorm(x, w, 1e-6, enable_pdl=pdl)
        lines.append(f"rmsnorm{' (pdl)' if pdl else ''}: relative error {error(y, reference(x)):.2e}")
        xi, ri = x.clone(), r.clone()
        total = (x.float() + r.float()).to(torch.bfloat16)
        norm.fused_add_rmsnorm(xi, ri, w, 1e-6, enable_pdl=pdl)
        lines.append(f"fused_add_rmsnorm{' (pdl)' if pdl else ''}: relative error {error(xi, reference(total)):.2e}, "
                     f"residual {'exact' if torch.equal(ri, total) else 'DIFFERENT'}")
    torch.cuda.synchronize()
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.flashinfer_ext.build", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--include", type=Path, required=True, metavar="DIR",
                        help="directory holding flashinfer/norm.cuh and what it includes")
    parser.add_argument("--build-dir", type=Path, default=None, metavar="DIR",
                        help=f"where to build (default ${flashinfer_ext.ENV}, else {flashinfer_ext.DEFAULT_DIR}; "
                             "pyrms.bench looks there)")
    parser.add_argument("--no-check", action="store_true", help="build only (the check needs a GPU)")
    parser.add_argument("--verbose", action="store_true", help="show the compiler's commands")
    args = parser.parse_args(argv)
    build_dir = args.build_dir or flashinfer_ext.build_dir()
    try:
        path = build(args.include, build_dir, args.verbose)
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    print(f"built {path}")
    if not args.no_check:
        for line in check(build_dir):
            print(f"  {line}")
    if args.build_dir is not None and args.build_dir.resolve() != flashinfer_ext.build_dir().resolve():
        print(f"  (pyrms.bench finds it with {flashinfer_ext.ENV}={args.build_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
