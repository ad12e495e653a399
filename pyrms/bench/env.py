"""Facts about the machine a run measured: the device, the versions, the command line."""
from __future__ import annotations

import datetime
import importlib.metadata
import platform
import shlex
import subprocess
import sys

PACKAGES = ("cuda-bindings", "cuda-pathfinder", "nvidia-cuda-nvrtc", "nvidia-cuda-cccl", "nvidia-cuda-nvrtc-cu12",
            "nvidia-cuda-cccl-cu12", "numpy", "ml_dtypes", "torch", "triton", "matplotlib", "liger-kernel",
            "flashinfer-python")


def command_line(argv) -> str:
    return "python -m pyrms.bench" + "".join(" " + shlex.quote(a) for a in argv)


def package_versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def driver_version() -> str | None:
    """The CUDA driver's version, e.g. '13.0' (None without a driver)."""
    from ..driver import driver_version as version

    return version()


def nvidia_smi() -> dict | None:
    """Clocks, power and temperature as nvidia-smi reports them at the start (None without it)."""
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(fields.split(","), values))


def collect(device, argv) -> dict:
    from .. import __version__
    from ..compiler import nvrtc_version

    try:
        nvrtc = ".".join(map(str, nvrtc_version()))
    except Exception as exc:  # reported, not fatal
        nvrtc = f"unknown ({exc})"
    return {
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command_line(argv),
        "argv": list(argv),
        "device": {
            "ordinal": device.ordinal, "name": device.name, "compute_capability": list(device.compute_capability),
            "multiprocessors": device.multiprocessor_count, "l2_bytes": device.l2_cache_bytes,
            "memory_bytes": device.total_memory,
        },
        "nvidia_smi": nvidia_smi(),
        "versions": {"python": platform.python_version(), "pyrms": __version__, "cuda_driver": driver_version(),
                     "nvrtc": nvrtc, **package_versions()},
        "platform": platform.platform(),
        "executable": sys.executable,
    }
