"""NVRTC compilation of the kernels in ``cuda_src/`` to CUBIN for an exact arch.

CUBIN, not PTX, is what gets loaded: an NVRTC newer than the driver emits PTX
that the driver rejects, while CUBIN for the device's own arch loads on any
driver of the same major version. PTX is produced on request, for inspection.

Templated kernels are instantiated through NVRTC name expressions; the lowered
(mangled) names come back with the CUBIN and are cached beside it. Results are
cached in memory and on disk (``pyrms.cache``) under a key covering everything
that changes the binary: the source, every project header it includes, the
options, the arch, the NVRTC version, the CCCL headers' version and pyrms's version.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from cuda.bindings import nvrtc

from . import cache, headers
from ._version import __version__
from .errors import CompileError, CudaError, NvrtcNotFoundError, check, register_describer

register_describer(
    nvrtc.nvrtcResult,
    lambda status: (status.name, nvrtc.nvrtcGetErrorString(status)[1].decode()),
)

SLOW_COMPILE_SECONDS = 1.0
_BASE_OPTIONS = ("-std=c++17", "-lineinfo")
_ARCH_RE = re.compile(r"^(?:sm_?|compute_)?(\d{2,3})([af]?)$")
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


@dataclass(frozen=True)
class CompiledProgram:
    """A compiled source: CUBIN bytes plus the lowered name of each name expression."""

    source_name: str
    arch: str
    options: tuple[str, ...]
    key: str
    cubin: bytes
    lowered_names: dict[str, str] = field(default_factory=dict)
    log: str = ""
    ptx: str | None = None
    from_cache: str = "none"  # "memory", "disk" or "none" (freshly compiled)
    compile_seconds: float = 0.0


def source_dir() -> Path:
    """The directory of the ``.cu`` files: the checkout's ``cuda_src/``, or the installed ``pyrms/cuda_src``."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "cuda_src", here / "cuda_src"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"kernel sources not found: neither {here.parent / 'cuda_src'} nor {here / 'cuda_src'} exists")


def available_sources() -> list[str]:
    return sorted(p.name for p in source_dir().glob("*.cu"))


def read_source(name: str) -> str:
    path = source_dir() / name
    if not path.is_file():
        raise ValueError(f"kernel source {name!r} not found in {source_dir()}; available: {', '.join(available_sources())}")
    return path.read_text(encoding="utf-8")


def project_headers(source: str) -> dict[str, str]:
    """Every ``#include "..."`` header of ``cuda_src/`` reached from ``source``, transitively."""
    found: dict[str, str] = {}
    pending = _INCLUDE_RE.findall(source)
    while pending:
        name = pending.pop()
        path = source_dir() / name
        if name in found or not path.is_file():
            continue
        found[name] = path.read_text(encoding="utf-8")
        pending.extend(_INCLUDE_RE.findall(found[name]))
    return found


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC that compiles; the first NVRTC call, which loads the library
    (NvrtcNotFoundError, naming the extras that bring it, where there is none)."""
    try:
        result = nvrtc.nvrtcVersion()
    except RuntimeError as exc:  # cuda.pathfinder's DynamicLibNotFoundError: no libnvrtc anywhere it looked
        raise NvrtcNotFoundError(
            f"NVRTC not found ({' '.join(str(exc).split())}). Install it with the extra of your driver's CUDA major "
            "(nvidia-smi shows it): `pip install pyrms-cuda[cu13]` or `pip install pyrms-cuda[cu12]`, or point "
            "CUDA_HOME at a CUDA toolkit that has it") from None
    return tuple(check(result, "nvrtcVersion"))


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    nvrtc_version()  # loads NVRTC, or says how to get it
    return tuple(check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def normalize_arch(arch: str | int) -> str:
    """'sm_90', '90', 90, 'sm90', 'compute_90', 'sm_90a' -> 'sm_90' / 'sm_90a'; ValueError for anything else."""
    match = _ARCH_RE.match(str(arch).strip().lower())
    supported = supported_archs()
    allowed = ", ".join(f"sm_{a}" for a in supported)
    if not match:
        raise ValueError(f"arch {arch!r} is not a CUDA arch; expected 'sm_XY' (optionally with an 'a' or 'f' suffix), one of: {allowed}")
    number = int(match.group(1))
    if number not in supported:
        raise ValueError(f"arch {arch!r} is not supported by NVRTC {'.'.join(map(str, nvrtc_version()))}; supported: {allowed}")
    return f"sm_{number}{match.group(2)}"


def resolve_arch(arch: str | int | None = None) -> str:
    """The arch to compile for: the argument, else ``$PYRMS_ARCH``, else the current GPU's."""
    if arch is None:
        arch = os.environ.get("PYRMS_ARCH") or None
    if arch is None:
        from . import driver  # only when no arch was given: compiling needs no GPU otherwise

        arch = driver.current_device().arch
    return normalize_arch(arch)


# Headers whose contents identify the versions of the CUDA headers the kernels include. CCCL's version is
# read from cub/version.cuh, which every CCCL release has (CUDA 12's CCCL 2.x has no cuda/std/__cccl/version.h).
_VERSIONED_HEADERS = ("cub/version.cuh", "cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp16.h", "cuda_fp16.hpp")


@functools.lru_cache(maxsize=None)
def _header_fingerprint() -> tuple[list[str], str]:
    """Include options, and a digest of the CUDA headers' versions (an upgrade changes the binary)."""
    dirs = headers.include_dirs(nvrtc_version()[0])
    digest = hashlib.sha256()
    for name in _VERSIONED_HEADERS:
        path = next((d / name for d in dirs if (d / name).is_file()), None)
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path else b"missing"))
    return [f"-I{d}" for d in dirs], digest.hexdigest()


def _cache_key(source_name, source, project, options, arch, name_expressions, headers_digest) -> str:
    material = json.dumps(
        {
            "source_name": source_name,
            "source": source,
            "headers": project,
            "options": list(options),
            "arch": arch,
            "name_expressions": list(name_expressions),
            "nvrtc": list(nvrtc_version()),
            "cuda_headers": headers_digest,
            "pyrms": __version__,
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


_memory: dict[str, CompiledProgram] = {}
_key_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def compile_source(
    source_name: str,
    *,
    arch: str | int | None = None,
    name_expressions=(),
    options=(),
    use_cache: bool | None = None,
    want_ptx: bool = False,
) -> CompiledProgram:
    """Compile ``cuda_src/<source_name>`` to CUBIN for ``arch``.

    ``name_expressions`` instantiate templates ("rms_norm_kernel<float, 256>"); their
    lowered names are in ``.lowered_names``. ``options`` are extra NVRTC options.
    ``use_cache`` defaults to the disk cache unless ``PYRMS_DISABLE_CACHE=1``; the
    in-memory cache is always used. ``want_ptx`` also returns the PTX (never cached).
    """
    return compile_text(source_name, read_source(source_name), arch=arch, name_expressions=name_expressions,
                        options=options, use_cache=use_cache, want_ptx=want_ptx)


def compile_text(
    source_name: str,
    source: str,
    *,
    arch: str | int | None = None,
    name_expressions=(),
    options=(),
    use_cache: bool | None = None,
    want_ptx: bool = False,
) -> CompiledProgram:
    """Compile CUDA C++ ``source`` (called ``source_name`` in messages; it may include the headers of
    ``cuda_src/``) as ``compile_source`` does, with the same caches."""
    arch = resolve_arch(arch)
    include_options, headers_digest = _header_fingerprint()
    all_options = (*_BASE_OPTIONS, f"-arch={arch}", *options)
    name_expressions = tuple(name_expressions)
    key = _cache_key(source_name, source, project_headers(source), all_options, arch, name_expressions, headers_digest)
    use_disk = cache.enabled() if use_cache is None else use_cache

    with _locks_guard:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        hit = _memory.get(key)
        if hit is not None and not want_ptx:
            return CompiledProgram(**{**hit.__dict__, "from_cache": "memory"})
        if use_disk and not want_ptx:
            entry = cache.load(key)
            if entry is not None:
                meta, cubin = entry
                program = CompiledProgram(source_name, arch, all_options, key, cubin,
                                          dict(meta.get("lowered_names", {})), meta.get("log", ""), None, "disk")
                _memory[key] = program
                return program
        start = time.perf_counter()
        cubin, lowered, log, ptx = _nvrtc_compile(source_name, source, arch, all_options, include_options,
                                                  name_expressions, want_ptx)
        seconds = time.perf_counter() - start
        program = CompiledProgram(source_name, arch, all_options, key, cubin, lowered, log, ptx, "none", seconds)
        _memory[key] = CompiledProgram(**{**program.__dict__, "ptx": None})
        where = None
        if use_disk:
            where = cache.store(key, {"source_name": source_name, "arch": arch, "lowered_names": lowered,
                                      "log": log, "options": list(all_options),
                                      "nvrtc": ".".join(map(str, nvrtc_version()))}, cubin)
        if seconds > SLOW_COMPILE_SECONDS and not quiet():
            cached = f"; cached in {where}" if where else "; not cached on disk"
            print(f"pyrms: compiled {source_name} ({len(name_expressions)} kernels) for {arch} "
                  f"in {seconds:.1f} s{cached}", file=sys.stderr)
        return program


def quiet() -> bool:
    """Whether ``PYRMS_QUIET`` (1, true, yes or on) asks for no messages on stderr about compiles."""
    return os.environ.get("PYRMS_QUIET", "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=None)
def _uselocale():
    """libc's uselocale, or None where there is none (Windows)."""
    try:
        function = ctypes.CDLL(None).uselocale
    except (OSError, AttributeError, TypeError):
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_void_p]
    return function


@contextlib.contextmanager
def _thread_locale_kept() -> Iterator[None]:
    """The calling thread's C locale as it was before the block. NVRTC 12.0's compile leaves the thread on
    the "C" locale (uselocale), whose codeset is ASCII: Python's default text encoding on that thread would
    turn to ASCII, and reading any UTF-8 file without an explicit encoding would fail, pyrms's own or the
    caller's."""
    uselocale = _uselocale()
    before = uselocale(None) if uselocale is not None else None  # NULL: only asks
    try:
        yield
    finally:
        if before is not None:
            uselocale(before)


def _nvrtc_compile(source_name, source, arch, options, include_options, name_expressions, want_ptx):
    with _thread_locale_kept():
        return _nvrtc_run(source_name, source, arch, options, include_options, name_expressions, want_ptx)


def _nvrtc_run(source_name, source, arch, options, include_options, name_expressions, want_ptx):
    program = check(nvrtc.nvrtcCreateProgram(source.encode(), source_name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        for expression in name_expressions:
            check(nvrtc.nvrtcAddNameExpression(program, expression.encode()), "nvrtcAddNameExpression")
        argv = [o.encode() for o in (*options, *include_options, f"-I{source_dir()}")]
        status = nvrtc.nvrtcCompileProgram(program, len(argv), argv)[0]
        log = _program_log(program)
        if status == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
            raise CompileError(source_name, log, list(options), arch, source)
        try:
            check((status,), "nvrtcCompileProgram")
        except CudaError as exc:  # e.g. an unknown option: the log names it
            raise CudaError(exc.call, exc.status, exc.name, f"{exc.description}; options: {' '.join(options)}; "
                            f"log: {log or '(empty)'}") from None
        cubin = bytes(_nvrtc_output(program, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN))
        lowered = {}
        for expression in name_expressions:
            name = check(nvrtc.nvrtcGetLoweredName(program, expression.encode()), "nvrtcGetLoweredName")
            lowered[expression] = name.decode()
        ptx = None
        if want_ptx:
            ptx = _nvrtc_output(program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX).rstrip(b"\0").decode()
        return cubin, lowered, log, ptx
    finally:
        check(nvrtc.nvrtcDestroyProgram(program), "nvrtcDestroyProgram")


def _nvrtc_output(program, get_size, get_data) -> bytearray:
    """One of NVRTC's outputs (log, CUBIN, PTX), copied into a buffer pyrms owns.

    NVRTC writes into the buffer it is given, so that buffer must be mutable and ours: a Python
    ``bytes`` is immutable, and a one-byte ``bytes`` (what an empty log's size of 1 made) is
    CPython's shared single-byte object; writing a NUL into it corrupted every later ``" "`` of
    the interpreter (docs/reliability.md; tests/test_compiler_owned_buffers.py).
    """
    size = check(get_size(program), get_size.__name__)
    buffer = bytearray(size)
    check(get_data(program, buffer), get_data.__name__)
    return buffer


def _program_log(program) -> str:
    log = _nvrtc_output(program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
    return log.rstrip(b"\0").decode(errors="replace").strip()


def clear_memory_cache() -> None:
    """Forget in-memory results (the disk cache is untouched); mainly for tests."""
    _memory.clear()
