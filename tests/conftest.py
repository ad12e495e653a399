"""Shared test setup: the ``gpu`` marker skips, with the reason, where no CUDA driver or device exists;
tests marked ``slow`` are left out unless ``-m`` is given; the ``rng`` fixture (reproducible per test),
the ``small`` source directory, the ``fake`` driver, ``names_only`` compiles and the ``host_device`` harness."""
import functools
import gc
import importlib.util
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.support.small_sources import BAD_CU, SMALL_CU, X_CUH


@functools.lru_cache(maxsize=None)
def _no_gpu_reason():
    from pyrms import driver

    return driver.unavailable_reason()


_slow_left_out = pytest.StashKey[int]()


def pytest_collection_modifyitems(config, items):
    # The plain command is the one a newcomer runs first, on a machine without a GPU: it leaves out what
    # only a thorough run needs (every kernel variant through NVRTC and ptxas, exhaustive sweeps) and
    # says so in the summary. Any -m expression (-m gpu, -m slow) chooses for itself, and a test named
    # by its node id runs.
    if not config.option.markexpr:
        named = tuple(arg for arg in config.args if "::" in arg)
        slow = [item for item in items if item.get_closest_marker("slow") and not item.nodeid.startswith(named)]
        if slow:
            left_out = set(map(id, slow))
            items[:] = [item for item in items if id(item) not in left_out]
            config.hook.pytest_deselected(items=slow)
            config.stash[_slow_left_out] = len(slow)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = _no_gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, config):
    count = config.stash.get(_slow_left_out, 0)
    if count:
        terminalreporter.write_line(f"{count} deselected: marked slow (every kernel variant compiled, exhaustive "
                                    "sweeps); -m slow runs them, as .ci/run does")


def pytest_collection_finish(session):
    # The fake fixture's gc.collect() after each test walks every object alive, and after collection that
    # is thousands of test items with their marks and parameters: about 0.1 s a test. Frozen, they are out
    # of the collector's sight; what a test leaves behind is made later and is still collected.
    gc.freeze()


@pytest.fixture
def rng(request):
    """A fresh stream of random inputs for every test, varied per test id and the same in every run
    (crc32, not hash(), which Python salts per process), so a failure can be reproduced."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def small(tmp_path, monkeypatch):
    """A source directory holding small.cu (which includes x.cuh) and bad.cu, used as cuda_src/;
    an empty cache directory; no pyrms environment switches; an empty in-memory compile cache."""
    from pyrms import compiler

    src = tmp_path / "src"
    src.mkdir()
    (src / "small.cu").write_text(SMALL_CU)
    (src / "x.cuh").write_text(X_CUH)
    (src / "bad.cu").write_text(BAD_CU)
    monkeypatch.setattr(compiler, "source_dir", lambda: src)
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("PYRMS_DISABLE_CACHE", "PYRMS_QUIET", "PYRMS_ARCH"):
        monkeypatch.delenv(name, raising=False)
    compiler.clear_memory_cache()
    yield src
    compiler.clear_memory_cache()


@pytest.fixture
def fake(monkeypatch):
    """pyrms's driver layer over a fresh fake_driver.FakeDriver, with nothing cached from before."""
    from tests.support.fake_driver import FakeDriver, fresh_driver_state

    fake_cu = FakeDriver()
    fresh_driver_state(monkeypatch.setattr, fake_cu)
    yield fake_cu
    gc.collect()  # run the finalizers of whatever the test left open while the fake is still in place


@pytest.fixture
def names_only(monkeypatch):
    """compiler.compile_source without NVRTC, for tests of what a launch packs and picks (a compile of a real unit
    takes seconds): each name expression's lowered name is the expression itself, the CUBIN a placeholder of the
    unit that the fake driver loads, and nothing reaches either cache. NVRTC compiles the real units in
    tests/test_compiler.py, tests/ops/test_fake_end_to_end.py, the tests marked slow and .ci/run's precompile."""
    from pyrms import compiler

    def compile_source(source_name, *, arch=None, name_expressions=(), **_):
        compiler.read_source(source_name)  # a source that is not there fails as it would
        names = tuple(name_expressions)
        return compiler.CompiledProgram(source_name, compiler.resolve_arch(arch), (), "",
                                        "\n".join((source_name, *names)).encode(), dict(zip(names, names)))

    monkeypatch.setattr(compiler, "compile_source", compile_source)


@pytest.fixture
def host_device(monkeypatch):
    """(differences, compared): operand names counted by the host harness's comparisons: device memory as
    host memory and launches that write nothing (tools/random_check_host_time.py), for the checkers."""
    path = Path(__file__).resolve().parent.parent / "tools" / "random_check_host_time.py"
    spec = importlib.util.spec_from_file_location("random_check_host_time", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    differences, compared = Counter(), Counter()
    module.install(Counter(), differences, patch=monkeypatch.setattr, compared=compared)
    return differences, compared
