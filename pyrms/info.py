"""``python -m pyrms.info``: what pyrms runs on, for bug reports and for checking an install.

Versions (pyrms, Python, cuda-bindings, NVRTC, numpy, ml_dtypes and the NVIDIA wheels), the CUDA
driver and its devices (or why there are none), the header directories NVRTC gets, the kernel cache
and the environment variables pyrms reads. Never raises and needs no GPU: what cannot be found is
reported as such. ``--json`` prints the same as one JSON object.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from typing import Any, Callable, Sequence

DISTRIBUTION = "pyrms-cuda"  # the name on PyPI; the import name is pyrms
PACKAGES = ("cuda-bindings", "cuda-pathfinder", "nvidia-cuda-nvrtc", "nvidia-cuda-cccl", "nvidia-cuda-runtime",
            "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-cccl-cu12", "nvidia-cuda-runtime-cu12", "numpy", "ml_dtypes", "torch")
# Every variable pyrms reads, and what it does.
ENVIRONMENT = {
    "PYRMS_ARCH": "arch to compile for when no GPU is asked (e.g. sm_90)",
    "PYRMS_CACHE_DIR": "compiled-kernel cache directory",
    "PYRMS_DISABLE_CACHE": "1/true/yes/on: no disk cache",
    "PYRMS_QUIET": "1/true/yes/on: no message for slow compiles, no precompile progress",
    "XDG_CACHE_HOME": "parent of the default cache directory (pyrms/ under it)",
    "CUDA_HOME": "CUDA toolkit searched for headers after the pip wheels",
    "CUDA_PATH": "CUDA toolkit searched for headers after CUDA_HOME",
}


def _probe(fn: Callable[[], Any]) -> Any:
    """fn(), or the reason it failed as {'error': ...}: one missing piece must not hide the rest."""
    try:
        return fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _versions() -> dict[str, Any]:
    from . import __version__

    out: dict[str, Any] = {"pyrms": __version__, DISTRIBUTION: _installed(DISTRIBUTION),
                           "python": f"{platform.python_version()} ({sys.executable})"}
    out.update({name: _installed(name) for name in PACKAGES})
    return out


def _nvrtc() -> dict[str, Any]:
    from . import compiler

    return {"version": ".".join(map(str, compiler.nvrtc_version())),
            "archs": [f"sm_{a}" for a in compiler.supported_archs()]}


def _driver() -> dict[str, Any]:
    from . import driver

    reason = driver.unavailable_reason()
    report: dict[str, Any] = {"version": driver.driver_version(), "devices": []}
    if reason is not None:
        report["unavailable"] = reason
        return report
    for ordinal in range(driver.device_count()):
        dev = driver.get_device(ordinal)
        report["devices"].append(_probe(lambda: {
            "ordinal": ordinal, "name": dev.name, "arch": dev.arch, "multiprocessors": dev.multiprocessor_count,
            "memory_gib": round(dev.total_memory / 2**30, 1)}))
    return report


def _headers() -> dict[str, Any]:
    from . import compiler, headers

    # The headers of NVRTC's CUDA major (without NVRTC, each probe reports why).
    return {name: _probe(lambda: str(headers.find(name, compiler.nvrtc_version()[0]))) for name in ("cccl", "cudart")}


def _cache() -> dict[str, Any]:
    from . import cache, compiler

    folder = cache.directory()
    return {**cache.report(folder), "exists": folder.is_dir(), "sources": str(compiler.source_dir())}


def _arch() -> str:
    from . import compiler, driver

    if os.environ.get("PYRMS_ARCH"):
        return f"{compiler.resolve_arch()} (PYRMS_ARCH)"
    if driver.unavailable_reason() is not None:
        return "none: no GPU to ask and PYRMS_ARCH is unset (pass --arch to the tools, or set PYRMS_ARCH)"
    return f"{compiler.resolve_arch()} (the current GPU's)"


def collect() -> dict[str, Any]:
    """Everything ``python -m pyrms.info`` prints, as a dict; never raises."""
    import pyrms

    return {
        "versions": _probe(_versions),
        "package": os.path.dirname(pyrms.__file__),
        "platform": platform.platform(),
        "driver": _probe(_driver),
        "nvrtc": _probe(_nvrtc),
        "arch": _probe(_arch),
        "headers": _probe(_headers),
        "cache": _probe(_cache),
        "environment": {name: os.environ.get(name) for name in ENVIRONMENT},
    }


def _text(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"error"}:
        return f"unavailable: {value['error']}"
    return "not installed" if value is None else str(value)


def format_report(report: dict[str, Any]) -> str:
    lines = ["pyrms"]
    versions = report["versions"]
    if "error" in versions:
        lines.append(f"  versions: {_text(versions)}")
    else:
        lines += [f"  {name + ':':<25} {_text(v)}" for name, v in versions.items()]
    lines += [f"  {'package:':<25} {report['package']}", f"  {'platform:':<25} {report['platform']}", "",
              "CUDA driver"]
    drv = report["driver"]
    if "error" in drv and len(drv) == 1:
        lines.append(f"  {_text(drv)}")
    else:
        lines.append(f"  {'version:':<25} {drv['version'] or 'none'}")
        if "unavailable" in drv:
            lines.append(f"  no usable GPU: {drv['unavailable']}")
        for d in drv["devices"]:
            lines.append(f"  device {d['ordinal']}: {d['name']}, {d['arch']}, {d['multiprocessors']} SMs, "
                         f"{d['memory_gib']} GiB" if "error" not in d else f"  device: {_text(d)}")
    nvrtc = report["nvrtc"]
    lines += ["", "NVRTC", f"  {'version:':<25} {nvrtc.get('version', _text(nvrtc))}"]
    if "archs" in nvrtc:
        lines.append(f"  {'archs:':<25} {' '.join(nvrtc['archs'])}")
    lines.append(f"  {'compiles for:':<25} {_text(report['arch'])}")
    lines += ["", "Headers"]
    hdrs = report["headers"]
    lines += [f"  {name + ':':<25} {_text(v)}" for name, v in hdrs.items()]
    lines += ["", "Kernel cache"]
    c = report["cache"]
    if "error" in c and len(c) == 1:
        lines.append(f"  {_text(c)}")
    else:
        state = "enabled" if c["enabled"] else "disabled (PYRMS_DISABLE_CACHE)"
        held = f"{c['entries']} entries, {c['bytes'] / 2**20:.1f} MiB" if c["exists"] else "not created yet"
        lines += [f"  {'directory:':<25} {c['directory']}", f"  {'state:':<25} {state}, {held}"]
        lines += [f"  {'by source and arch:' if k == 0 else '':<25} {name}: {g['entries']} entries, "
                  f"{g['bytes'] / 2**20:.1f} MiB" for k, (name, g) in enumerate(c["by_source"].items())]
        lines += [f"  {'kernel sources:':<25} {c['sources']}",
                  f"  {'':<25} (python -m pyrms.cache: by NVRTC version; --clear removes the entries)"]
    lines += ["", "Environment"]
    for name, value in report["environment"].items():
        shown = "(unset)" if value is None else repr(value)
        if value is not None and name in ("PYRMS_DISABLE_CACHE", "PYRMS_QUIET"):
            shown += " (on)" if value.strip().lower() in ("1", "true", "yes", "on") else " (off)"
        lines.append(f"  {name + ':':<25} {shown:<12} {ENVIRONMENT[name]}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyrms.info", description=(__doc__ or "").split(": ", 1)[1].splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument("--clear-cache", action="store_true",
                        help="remove pyrms's compiled kernels from the cache directory (and nothing else there), "
                             "as python -m pyrms.cache --clear does")
    args = parser.parse_args(argv)
    if args.clear_cache:
        from .cache import cli

        return cli.clear_and_say("pyrms.info")
    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
