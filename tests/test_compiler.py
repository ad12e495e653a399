"""NVRTC compilation and the compile cache, on the CPU (an explicit arch needs no GPU).

Every test points PYRMS_CACHE_DIR at a temporary directory; the user's ~/.cache is never touched.
The two real sources (seed, rms_norm) take seconds to compile, so each is compiled once per
module; the cache mechanics use a tiny kernel in a temporary source directory that compiles in
a tenth of a second and whose project header the tests can change.
"""
import json
import locale
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyrms import cache, compiler, dtypes, headers, ptx_inspect

from pyrms.ops import _row_plan as plan
from pyrms.errors import CompileError, HeaderNotFoundError, NvrtcNotFoundError
from tests.support.cubins import same_cubin
from tests.support.small_sources import BAD_CU, SMALL_CU, X_CUH
from pyrms.ops.rms_norm import plan as rms_plan
from tests.support.child_env import child_env

CUDA_SRC = Path(__file__).resolve().parent.parent / "cuda_src"

SEED_EXPR = "transformer::rms_norm_kernel<__nv_bfloat16, 8, 5120, 2, 640>"
SEED_LOWERED = "_ZN11transformer15rms_norm_kernelI13__nv_bfloat16Li8ELi5120ELi2ELi640EEEvPT_PKS2_S5_f"
SMALL_LOWERED = {"k<3>": "_Z1kILi3EEvPi"}


def _entry_body(ptx: str, lowered: str) -> str:
    """The PTX of one kernel: from its .entry line to the closing brace at the start of a line."""
    start = ptx.index(f".entry {lowered}(")
    return ptx[start:ptx.index("\n}", start)]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("shared-cache")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, shared_cache):
    """A known environment for every test: the shared temporary cache, enabled, no quiet switch."""
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(shared_cache))
    for name in ("PYRMS_DISABLE_CACHE", "PYRMS_QUIET", "PYRMS_ARCH"):
        monkeypatch.delenv(name, raising=False)
    compiler.clear_memory_cache()  # each test sees only what it compiled itself, or the disk


def _compile_with_cache(shared_cache, source, expressions):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYRMS_CACHE_DIR", str(shared_cache))
        mp.delenv("PYRMS_DISABLE_CACHE", raising=False)
        return compiler.compile_source(source, arch="sm_90", name_expressions=expressions, want_ptx=True)


@pytest.fixture(scope="module")
def seed_program(shared_cache):
    return _compile_with_cache(shared_cache, "seed_rms_norm.cu", [SEED_EXPR])


@pytest.fixture(scope="module")
def rms_program(shared_cache):
    return _compile_with_cache(shared_cache, "rms_norm.cu", rms_plan.variant_group(dtypes.BFLOAT16, False, False))




def _compile_small(**kwargs):
    kwargs.setdefault("arch", "sm_90")
    kwargs.setdefault("name_expressions", ["k<3>"])
    return compiler.compile_source("small.cu", **kwargs)


# --- the real sources ------------------------------------------------------------------------------

def test_seed_compiles(seed_program):
    assert seed_program.lowered_names == {SEED_EXPR: SEED_LOWERED}
    assert seed_program.cubin[:4] == b"\x7fELF"
    assert seed_program.arch == "sm_90" and "-arch=sm_90" in seed_program.options
    assert seed_program.from_cache == "none"
    assert f".entry {SEED_LOWERED}(" in seed_program.ptx


def test_seed_ptx_has_16_byte_loads_and_stores(seed_program):
    body = _entry_body(seed_program.ptx, SEED_LOWERED)
    assert re.search(r"\bld\.global(\.nc)?\.v4\.(u32|b32|f32)\s", body), "no 16-byte load in the seed kernel"
    assert re.search(r"\bst\.global\.v4\.(u32|b32|f32)\s", body), "no 16-byte store in the seed kernel"


def test_rms_norm_compiles_every_variant(rms_program):
    expressions = rms_plan.variant_group(dtypes.BFLOAT16, False, False)
    assert len(expressions) == 1 + len(plan.CACHE_CHOICES) + 2 * len(plan.FEW_ROW_SHAPES)
    assert set(rms_program.lowered_names) == set(expressions)
    lowered = list(rms_program.lowered_names.values())
    assert len(set(lowered)) == len(expressions)
    for name in lowered:
        assert name.startswith("_ZN5pyrms15rms_norm_kernelI13__nv_bfloat16")
        assert f".entry {name}(" in rms_program.ptx


def test_rms_norm_aligned_path_is_16_bytes_wide(rms_program):
    # Every variant has the aligned body: 16-byte loads of input (and weight) and 16-byte stores,
    # the row's own with the cache-streaming hint (.cs).
    for expression, lowered in rms_program.lowered_names.items():
        body = _entry_body(rms_program.ptx, lowered)
        assert re.search(r"\bld\.global(\.nc|\.cs)?\.v4\.(u32|b32|f32)\s", body), expression
        assert re.search(r"\bst\.global\.cs\.v4\.(u32|b32|f32)\s", body), expression
        if ", 0," not in expression:  # the register-cached variants load their vectors with .cs too
            assert re.search(r"\bld\.global\.cs\.v4\.(u32|b32|f32)\s", body), expression


def test_every_kernel_waits_for_its_producer_before_touching_memory(rms_program):
    """Programmatic dependent launch (common.cuh): griddepcontrol.wait precedes every global access,
    and launch_dependents follows it, in every variant (the other families: tests/ops/test_family.py)."""
    functions = {fn.name: fn for fn in ptx_inspect.parse_functions(rms_program.ptx)}
    for lowered in rms_program.lowered_names.values():
        assert functions[lowered].waits_before_memory(), lowered


def test_memory_then_disk_hit(seed_program):
    # seed_program was compiled into the shared cache; the autouse fixture cleared memory.
    from_disk = compiler.compile_source("seed_rms_norm.cu", arch="sm_90", name_expressions=[SEED_EXPR])
    assert from_disk.from_cache == "disk"
    assert (from_disk.key, from_disk.cubin, from_disk.lowered_names) == (
        seed_program.key, seed_program.cubin, seed_program.lowered_names)
    assert from_disk.ptx is None
    from_memory = compiler.compile_source("seed_rms_norm.cu", arch=90, name_expressions=[SEED_EXPR])
    assert from_memory.from_cache == "memory" and from_memory.cubin == seed_program.cubin


# --- the cache, with a tiny kernel ---------------------------------------------------------------

def test_cache_dir_env_is_honoured(small, tmp_path):
    program = _compile_small()
    assert program.lowered_names == SMALL_LOWERED and program.from_cache == "none"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f"{program.key}.cubin"]
    meta, cubin = cache.load(program.key)
    assert cubin == program.cubin and meta["lowered_names"] == SMALL_LOWERED


def test_source_change_is_a_miss(small):
    first = _compile_small()
    (small / "small.cu").write_text(SMALL_CU.replace("N + kValue", "N * kValue"))
    second = _compile_small()
    assert second.key != first.key and second.from_cache == "none"


def test_project_header_change_is_a_miss(small):
    assert compiler.project_headers(SMALL_CU) == {"x.cuh": X_CUH}
    first = _compile_small()
    (small / "x.cuh").write_text("#pragma once\nconstexpr int kValue = 4321;\n")
    second = _compile_small()
    assert second.key != first.key and second.from_cache == "none"
    assert second.cubin != first.cubin
    (small / "x.cuh").write_text("#pragma once\nconstexpr int kValue = 7;\n")
    again = _compile_small()
    assert again.key == first.key and again.from_cache == "memory"


def test_options_arch_and_expressions_change_the_key(small):
    base = _compile_small().key
    variants = {
        "options": _compile_small(options=["-DUNUSED=1"]).key,
        "arch": _compile_small(arch="sm_80").key,
        "expressions": _compile_small(name_expressions=["k<4>"]).key,
    }
    assert base not in variants.values() and len(set(variants.values())) == 3
    assert _compile_small().key == base


def test_key_covers_the_cuda_header_versions():
    # A versioned header that is not found would mean a header upgrade no longer changes keys.
    include_options, digest = compiler._header_fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    dirs = headers.include_dirs(compiler.nvrtc_version()[0])
    for name in compiler._VERSIONED_HEADERS:
        assert any((d / name).is_file() for d in dirs), name
    assert include_options == [f"-I{d}" for d in dirs]


def test_disable_cache_writes_nothing(small, tmp_path, monkeypatch):
    monkeypatch.setenv("PYRMS_DISABLE_CACHE", "1")
    assert _compile_small().from_cache == "none"
    compiler.clear_memory_cache()
    assert _compile_small().from_cache == "none"
    assert not (tmp_path / "cache").exists()


def _truncate(blob, other):
    return blob[: len(blob) // 2]


def _flip_byte(blob, other):
    return blob[:100] + bytes([blob[100] ^ 0x01]) + blob[101:]


@pytest.mark.parametrize("corrupt", [
    _truncate,
    _flip_byte,
    lambda blob, other: os.urandom(len(blob)),  # garbage
    lambda blob, other: b"NOT-A-PYRMS-CACHE\n" + blob[len(b"PYRMS-CUBIN-1\n"):],  # wrong magic
    lambda blob, other: b"",  # empty
    lambda blob, other: other,  # a valid entry, but of another key
], ids=["truncated", "flipped-byte", "garbage", "wrong-magic", "empty", "other-key"])
def test_corrupt_entry_is_a_miss_and_is_rewritten(small, corrupt):
    other = _compile_small(name_expressions=["k<9>"])
    program = _compile_small()
    path = cache.directory() / f"{program.key}.cubin"
    good = path.read_bytes()
    path.write_bytes(corrupt(good, (cache.directory() / f"{other.key}.cubin").read_bytes()))
    assert cache.load(program.key) is None
    compiler.clear_memory_cache()
    recompiled = _compile_small()
    assert recompiled.from_cache == "none" and same_cubin(recompiled.cubin, program.cubin)
    meta, cubin = cache.load(program.key)  # the entry was rewritten whole
    assert cubin == recompiled.cubin and meta["lowered_names"] == SMALL_LOWERED
    compiler.clear_memory_cache()
    assert _compile_small().from_cache == "disk"


_RACER = """
import json, sys, time
from pathlib import Path
from pyrms import compiler
src, ready, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
compiler.source_dir = lambda: src
ready.touch()
while not go.exists():  # start both compiles at the same moment
    time.sleep(0.002)
p = compiler.compile_source("small.cu", arch="sm_90", name_expressions=["k<3>"])
print(json.dumps({"key": p.key, "lowered": p.lowered_names}))
"""


def test_two_processes_compile_the_same_key_at_once(small, tmp_path):
    env = child_env(PYRMS_CACHE_DIR=str(tmp_path / "cache"))
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(small), str(r), str(go)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in ready]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    results = [r.communicate(timeout=120) for r in racers]
    for racer, (out, err) in zip(racers, results):
        assert racer.returncode == 0, err
    keys = {json.loads(out)["key"] for out, _ in results}
    assert len(keys) == 1
    key = keys.pop()
    assert all(json.loads(out)["lowered"] == SMALL_LOWERED for out, _ in results)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f"{key}.cubin"]  # no temp files left
    meta, cubin = cache.load(key)
    assert meta["lowered_names"] == SMALL_LOWERED and cubin[:4] == b"\x7fELF"


# --- errors and messages -----------------------------------------------------------------------

def test_compile_error_carries_log_options_arch_and_numbered_source(small, tmp_path):
    with pytest.raises(CompileError) as caught:
        compiler.compile_source("bad.cu", arch="sm_90", options=["-DEXTRA=1"])
    error = caught.value
    message = str(error)
    assert message.startswith("NVRTC failed to compile bad.cu for sm_90\n")
    assert "options: -std=c++17 -lineinfo -arch=sm_90 -DEXTRA=1\n" in message
    assert 'bad.cu(3): error: identifier "undefined_name" is undefined' in message
    assert "--- source ---\n    1 | __global__ void k(int* out) {\n    2 |   int a = 1;\n" \
           "    3 |   out[0] = undefined_name + a;\n    4 | }" in message
    assert error.arch == "sm_90" and "undefined_name" in error.log and error.source == BAD_CU
    assert not (tmp_path / "cache").exists()  # nothing cached for a failure


@pytest.mark.parametrize("arch", ["sm_1", "banana", "sm_9000", "", "sm_37", "compute_"])
def test_bad_arch_is_a_value_error_naming_it(arch):
    allowed = ", ".join(f"sm_{a}" for a in compiler.supported_archs())
    with pytest.raises(ValueError) as caught:
        compiler.normalize_arch(arch)
    assert repr(arch) in str(caught.value) and allowed in str(caught.value)
    with pytest.raises(ValueError, match=re.escape(repr(arch))):
        compiler.compile_source("seed_rms_norm.cu", arch=arch, name_expressions=[SEED_EXPR])


@pytest.mark.parametrize("arch, expected", [
    ("sm_90", "sm_90"), ("90", "sm_90"), (90, "sm_90"), ("compute_90", "sm_90"), ("sm_90a", "sm_90a"),
    ("sm90", "sm_90"), (" SM_80 ", "sm_80"),
])
def test_normalize_arch_accepts(arch, expected):
    assert compiler.normalize_arch(arch) == expected


def test_arch_from_environment(small, monkeypatch):
    monkeypatch.setenv("PYRMS_ARCH", "sm_80")
    assert _compile_small(arch=None).arch == "sm_80"


@pytest.fixture
def no_headers(tmp_path, monkeypatch):
    """Nothing anywhere: no wheel on sys.path, pathfinder finds nothing and the only toolkit root is an empty
    directory."""
    empty = tmp_path / "empty-cuda"
    empty.mkdir()
    monkeypatch.setenv("CUDA_HOME", str(empty))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(headers, "_site_dirs", lambda: [])
    monkeypatch.setattr(headers, "_pathfinder_dir", lambda name: None)
    # /usr/local/cuda, the last fallback, is a real toolkit on many machines: leave only CUDA_HOME.
    monkeypatch.setattr(headers, "_toolkit_roots", lambda: [os.environ["CUDA_HOME"]])
    headers.find.cache_clear()
    compiler._header_fingerprint.cache_clear()
    yield empty
    headers.find.cache_clear()
    compiler._header_fingerprint.cache_clear()


def test_missing_headers(no_headers):
    major = compiler.nvrtc_version()[0]
    with pytest.raises(HeaderNotFoundError) as caught:
        headers.find("cccl", major)
    message = str(caught.value)
    assert "cuda.pathfinder (found nothing)" in message
    assert f"{no_headers}/include/cccl (no cub/block/block_reduce.cuh)" in message
    assert f"{no_headers}/include (no cub/block/block_reduce.cuh)" in message
    assert f"pip install pyrms-cuda[cu{major}]" in message
    with pytest.raises(HeaderNotFoundError, match=re.escape(f"pip install pyrms-cuda[cu{major}]")):
        compiler.compile_source("seed_rms_norm.cu", arch="sm_90", name_expressions=[SEED_EXPR])


def test_missing_runtime_headers_name_their_extra(no_headers):
    with pytest.raises(HeaderNotFoundError, match=r"cuda_bf16\.h.*NVRTC is CUDA 12's.*pip install pyrms-cuda\[cu12\]"):
        headers.find("cudart", 12)


def _fake_headers(root: Path, major: int) -> dict[str, Path]:
    """Both header sets of CUDA ``major`` as its pip wheels lay them out under ``root``: the marker headers,
    and the version headers saying ``major`` (CUDART_VERSION 12000 or 13000; CUB 2.x or 3.x)."""
    found = {}
    for name, relative in headers._WHEEL_DIRS[major].items():
        directory = root / relative
        marker, version_header, text = {
            "cccl": ("cub/block/block_reduce.cuh", "cub/version.cuh", f"#define CUB_VERSION {major - 10}00100\n"),
            "cudart": ("cuda_bf16.h", "cuda_runtime_api.h", f"#define CUDART_VERSION  {major}000\n"),
        }[name]
        for relative_file, content in ((marker, ""), (version_header, text)):
            (directory / relative_file).parent.mkdir(parents=True, exist_ok=True)
            (directory / relative_file).write_text(content)
        found[name] = directory
    return found


@pytest.mark.parametrize("major", [12, 13])
def test_headers_are_those_of_nvrtcs_major_when_both_majors_are_installed(no_headers, tmp_path, monkeypatch, major):
    """An environment may hold both majors' wheels (the cu12 extra beside CUDA 13's, or a --target install
    before the system's site-packages): the headers taken are those of the major asked, from the first
    sys.path entry holding them, whatever the order."""
    other = 25 - major
    first, second = _fake_headers(tmp_path / "first", other), _fake_headers(tmp_path / "second", major)
    monkeypatch.setattr(headers, "_site_dirs", lambda: [str(tmp_path / "first"), str(tmp_path / "second")])
    assert headers.include_dirs(major) == [second["cccl"], second["cudart"]]
    assert headers.include_dirs(other) == [first["cccl"], first["cudart"]]


def test_headers_of_another_major_are_refused_with_the_reason(no_headers, monkeypatch):
    """A toolkit of the wrong major (CUDA_HOME at a CUDA 13 toolkit while NVRTC is 12's) is not taken: its
    headers do not parse with the older NVRTC. The message names it and why."""
    _fake_headers(no_headers, 13)
    # The CUDA 13 wheel's root is laid out as a toolkit's: the runtime headers in include/, CCCL in include/cccl.
    toolkit = no_headers / "nvidia" / "cu13"
    monkeypatch.setattr(headers, "_toolkit_roots", lambda: [str(toolkit)])
    with pytest.raises(HeaderNotFoundError) as caught:
        headers.find("cudart", 12)
    assert f"{toolkit}/include (CUDA 13's, not 12's)" in str(caught.value)
    assert headers.find("cudart", 13) == toolkit / "include"
    assert headers.find("cccl", 13) == toolkit / "include" / "cccl"


def test_no_nvrtc_names_the_extras(monkeypatch):
    """Without NVRTC (a plain install on a machine without a toolkit), cuda-bindings' first NVRTC call raises
    cuda.pathfinder's error; pyrms says which extra brings NVRTC."""
    class NoLibrary:
        nvrtcResult = compiler.nvrtc.nvrtcResult

        def __getattr__(self, name):
            def call(*args):
                raise RuntimeError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12": No such file')
            return call

    monkeypatch.setattr(compiler, "nvrtc", NoLibrary())
    compiler.nvrtc_version.cache_clear()
    compiler.supported_archs.cache_clear()
    try:
        for call in (compiler.nvrtc_version, compiler.supported_archs, lambda: compiler.normalize_arch("sm_90")):
            with pytest.raises(NvrtcNotFoundError, match=r"NVRTC not found \(Failure finding .*libnvrtc.so.12.*\)\. "
                               r"Install it .*pyrms-cuda\[cu13\].*pyrms-cuda\[cu12\]"):
                call()
    finally:
        compiler.nvrtc_version.cache_clear()
        compiler.supported_archs.cache_clear()


def test_compiling_leaves_the_threads_text_encoding_alone():
    """NVRTC 12.0 leaves the thread that compiled on the C locale, whose codeset is ASCII (Python's default
    text encoding there would follow); the compiler puts the thread's locale back."""
    before = locale.getpreferredencoding(False)
    compiler.compile_text("locale.cu", '__global__ void k() { /* \u00b5s */ }', arch="sm_90", use_cache=False)
    assert locale.getpreferredencoding(False) == before


def test_sources_read_as_utf8_whatever_the_locale():
    """The kernel sources hold UTF-8 text (quant.cuh, static_quant.cu); they read in an ASCII locale too."""
    code = ("from pyrms import compiler; source = compiler.read_source('static_quant.cu'); "
            "assert not source.isascii() and compiler.project_headers(source)['quant.cuh']")
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).resolve().parent.parent)


def test_slow_compile_is_reported_with_its_duration(small, monkeypatch, capsys):
    monkeypatch.setattr(compiler, "SLOW_COMPILE_SECONDS", 0)
    program = _compile_small()
    err = capsys.readouterr().err
    where = cache.directory() / f"{program.key}.cubin"
    expected = rf"pyrms: compiled small\.cu \(1 kernels\) for sm_90 in \d+\.\d s; cached in {re.escape(str(where))}\n"
    assert re.fullmatch(expected, err), err
    _compile_small()  # a memory hit is not a compile
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("PYRMS_QUIET", "1")
    _compile_small(arch="sm_80")
    assert capsys.readouterr().err == ""


def test_no_generic_lambdas_in_the_kernels():
    """No lambda in cuda_src takes an `auto` parameter: NVRTC 13.0 (the GPU machine's) compiles a generic
    lambda's operator() as a host function and refuses it in JIT mode, where NVRTC 13.5 here accepts it
    (fused add's 40 fp32-sum units once failed on the GPU machine only)."""
    generic = re.compile(r"\[[^\]\n]*\]\s*\([^)]*\bauto\b")
    found = [f"{path.name}:{n}" for path in sorted(CUDA_SRC.glob("*.cu*"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if generic.search(line)]
    assert not found, f"generic lambdas (use a functor with overloads): {found}"
