"""Every buffer that C code writes into is one pyrms owns and may mutate (docs/reliability.md).

NVRTC once received ``b" " * size`` as its output buffer: a successful compile has an empty log of
size 1, and ``b" " * 1`` is CPython's shared single-byte object, so writing the log's NUL into it
turned every later ``" "`` of the interpreter into ``"\\0"`` (seen on Python 3.12; 3.11 hid it).
"""
import functools
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.small_sources import SMALL_CU
from pyrms import compiler

# The NVRTC calls that write into a caller's buffer: (size call, data call).
_OUTPUT_CALLS = ("nvrtcGetProgramLog", "nvrtcGetCUBIN", "nvrtcGetPTX")


def test_interpreter_intact_after_a_compile_with_an_empty_log(tmp_path):
    """In a fresh interpreter (the corruption is process-wide): compile with an empty log, cache off,
    then the single-byte objects and print's separator must be what they were."""
    (tmp_path / "small.cu").write_text(SMALL_CU.replace('#include "x.cuh"\n', "constexpr int kValue = 7;\n"))
    script = textwrap.dedent(f"""
        from pathlib import Path
        from pyrms import compiler
        compiler.source_dir = lambda: Path({str(tmp_path)!r})
        program = compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<3>"], want_ptx=True)
        assert program.log == "", program.log  # the case that broke: NVRTC's log size is 1
        assert " ".encode()[0] == 32, " ".encode()
        assert bytes([32]) == b" " and chr(32).encode() == b" "
        print("a", "b")
    """)
    env = {**os.environ, "PYRMS_DISABLE_CACHE": "1", "PYRMS_QUIET": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout == b"a b\n"


def test_nvrtc_output_buffers_are_mutable_and_owned(small, monkeypatch):
    """Wrap NVRTC's output calls: none may receive a bytes object (or anything but a fresh bytearray)."""
    seen = []

    def recording(real):
        @functools.wraps(real)
        def call(program, buffer):
            seen.append((real.__name__, type(buffer)))
            return real(program, buffer)
        return call

    for name in _OUTPUT_CALLS:
        monkeypatch.setattr(compiler.nvrtc, name, recording(getattr(compiler.nvrtc, name)))
    compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<1>"], use_cache=False, want_ptx=True)
    with pytest.raises(Exception):  # a failing compile reads its (non-empty) log the same way
        compiler.compile_source("bad.cu", arch="sm_90", use_cache=False)
    assert {name for name, _ in seen} == set(_OUTPUT_CALLS)
    assert all(kind is bytearray for _, kind in seen), seen


def test_bench_spin_kernel_compiles_through_the_one_nvrtc_path(monkeypatch):
    """The benchmark's spin kernel once had its own copy of the NVRTC calls, with the same bytes
    buffers; it must go through compiler.compile_text."""
    from pyrms.bench import timing

    calls = []
    real = compiler.compile_text
    monkeypatch.setattr(compiler, "compile_text", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    assert timing.compile_spin("sm_90")[:4] == b"\x7fELF"
    assert calls == ["pyrms_bench_spin.cu"]
