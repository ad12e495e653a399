"""The disk cache survives a process killed (SIGKILL) while it writes an entry, and an unwritable cache.

A child process compiles a tiny kernel into a fresh PYRMS_CACHE_DIR and is killed at a chosen moment of
cache.store: half-way through writing the temporary file, after writing it but before os.replace, or
right after os.replace. The parent then compiles the same kernel with the same cache directory: it must
get a whole, correct CUBIN (never a truncated one read from disk) and leave a whole entry behind.
Runs on the CPU (NVRTC for sm_90). Two processes compiling the same key at once: test_compiler.py.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyrms import cache, compiler
from tests.support.child_env import child_env
from tests.support.cubins import same_cubin

EXPRESSIONS = ["k<3>"]

_CHILD = r"""
import os, signal, sys, time
from pathlib import Path
from pyrms import cache, compiler

source_dir, moment = Path(sys.argv[1]), sys.argv[2]
compiler.source_dir = lambda: source_dir
real_fdopen, real_replace = os.fdopen, os.replace


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


class HalfWriter:
    # The temporary file cache.store writes: half the bytes reach the disk, then the process dies.
    def __init__(self, f):
        self.f = f
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()
    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        os.fsync(self.f.fileno())
        print("wrote", len(data) // 2, "of", len(data), flush=True)
        die()


if moment == "mid-write":
    os.fdopen = lambda fd, *args, **kwargs: HalfWriter(real_fdopen(fd, *args, **kwargs))
elif moment == "before-replace":
    os.replace = lambda src, dst: die()
elif moment == "after-replace":
    def replace_then_die(src, dst):
        real_replace(src, dst)
        die()
    os.replace = replace_then_die
compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<3>"])
print("not killed")
"""


def _compile(**kwargs):
    return compiler.compile_source("small.cu", arch="sm_90", name_expressions=EXPRESSIONS, **kwargs)


def _killed_children(src: Path, moment: str, count: int = 1) -> list[str]:
    """The output of ``count`` children killed at ``moment``, started together (each one's imports take a
    second)."""
    env = child_env()
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, str(src), moment], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(count)]
    said = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == -signal.SIGKILL, (child.returncode, out, err)
        said.append(out)
    return said


def _entries(directory: Path):
    files = sorted(directory.iterdir()) if directory.exists() else []
    return [p for p in files if p.suffix == ".cubin"], [p for p in files if p.suffix == ".tmp"]


@pytest.mark.parametrize("moment", ["mid-write", "before-replace"])
def test_a_writer_killed_before_its_entry_exists_leaves_a_working_cache(small, moment):
    reference = _compile(use_cache=False)  # the right answer, compiled without the disk cache
    compiler.clear_memory_cache()
    [said] = _killed_children(small, moment)
    entries, temps = _entries(cache.directory())
    assert entries == [] and len(temps) == 1  # no entry: only the killed writer's temporary file
    blob = temps[0].read_bytes()
    if moment == "mid-write":
        assert "wrote" in said and 0 < len(blob) < 2 * len(reference.cubin)
    assert cache.load(reference.key) is None
    program = _compile()
    assert program.from_cache == "none"  # compiled again: nothing partial was read
    assert (program.key, program.lowered_names) == (reference.key, reference.lowered_names)
    assert same_cubin(program.cubin, reference.cubin)
    meta, cubin = cache.load(reference.key)  # and stored whole, beside the leftover temporary file
    assert cubin == program.cubin and meta["lowered_names"] == reference.lowered_names
    compiler.clear_memory_cache()
    assert _compile().from_cache == "disk"


def test_a_writer_killed_right_after_os_replace_leaves_a_whole_entry(small):
    reference = _compile(use_cache=False)
    compiler.clear_memory_cache()
    _killed_children(small, "after-replace")
    entries, temps = _entries(cache.directory())
    assert [p.name for p in entries] == [f"{reference.key}.cubin"] and temps == []
    program = _compile()
    assert program.from_cache == "disk" and same_cubin(program.cubin, reference.cubin)


def test_temporary_files_of_killed_writers_are_never_read(small):
    """Three killed writers: three leftover temporary files, none of them taken for an entry."""
    _killed_children(small, "mid-write", 3)
    entries, temps = _entries(cache.directory())
    assert entries == [] and len(temps) == 3
    program = _compile()
    assert program.from_cache == "none" and program.cubin[:4] == b"\x7fELF"
    entries, temps_after = _entries(cache.directory())
    assert len(entries) == 1 and temps_after == temps


def test_stale_temporary_files_are_cleaned_up(small):
    _killed_children(small, "mid-write")
    _, temps = _entries(cache.directory())
    two_days_ago = time.time() - 2 * 86400
    for tmp in temps:  # stale beyond doubt: no live writer takes two days
        os.utime(tmp, (two_days_ago, two_days_ago))
    _compile()  # a successful store is the natural moment to sweep
    assert _entries(cache.directory())[1] == []


def test_a_cache_directory_that_is_a_file_only_costs_the_cache(small, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(blocker))
    program = _compile()
    assert program.from_cache == "none" and program.cubin[:4] == b"\x7fELF"
    assert cache.store(program.key, {}, program.cubin) is None
    compiler.clear_memory_cache()
    assert _compile().from_cache == "none"  # nothing on disk, no exception either


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_cache_directory_only_costs_the_cache(small, tmp_path, monkeypatch):
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o500)
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(directory))
    try:
        assert _compile().from_cache == "none"
        assert list(directory.iterdir()) == []
    finally:
        directory.chmod(0o700)
