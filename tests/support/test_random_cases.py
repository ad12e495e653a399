"""The randomized check's generator (tests.support.random_cases) and runner (tools.random_check), on the CPU.

The generator must be reproducible from (seed, index) alone, stay inside the documented ranges, and
reach every op, dtype and option within 5,000 cases; each case's repro line must read back to the
same case; the runner must keep going after a failure and say which cases failed. The GPU run of
the same cases is tests/tools/test_random_check_gpu.py.
"""
import inspect
import json
import math
from collections import Counter

import numpy as np
import pytest

from pyrms import errors
from tools import random_check
from tests.support import testing
from tests.support.random_cases import (DTYPES, MAX_ELEMENTS, MAX_HIDDEN, OPS, SPECIAL_HIDDENS, Case, draw_case, draw_cases,
                                features, operands)
from pyrms.ops._norm_backward import plan as bwd_plan

COUNT = 5000


@pytest.fixture(scope="module")
def cases():
    return draw_cases(2026, COUNT)


def test_same_seed_same_cases_and_case_i_does_not_depend_on_count():
    first = draw_cases(7, 60)
    assert draw_cases(7, 60) == first
    assert draw_cases(7, 20, start=40) == first[40:]
    assert draw_case(7, 33) == first[33]
    assert [c.index for c in first] == list(range(60))
    assert draw_cases(8, 60) != first  # the seed matters
    assert len({c.line().split(" ", 2)[2] for c in first}) > 50  # and so does the index


def test_operand_values_come_from_seed_and_index():
    a, b = draw_case(3, 0), draw_case(3, 1)
    assert np.array_equal(random_check.data_rng(a).random(8), random_check.data_rng(a).random(8))
    assert not np.array_equal(random_check.data_rng(a).random(8), random_check.data_rng(b).random(8))


def test_negative_seed_or_index_is_refused():
    with pytest.raises(ValueError, match="seed=-1"):
        draw_case(-1, 0)
    with pytest.raises(ValueError, match="index=-2"):
        draw_case(0, -2)


def test_every_op_dtype_and_option_is_drawn(cases):
    seen = Counter((c.op, name) for c in cases for name in features(c))
    rms, layer = ("rms_norm", "fused_add_rms_norm", "rms_norm_backward"), ("layer_norm", "layer_norm_backward")
    backward = ("rms_norm_backward", "layer_norm_backward")
    wanted = {(op, f"dtype={d}") for op in OPS for d in DTYPES}
    wanted |= {(op, f"stream={s}") for op in OPS for s in ("none", "stream", "handle")}
    wanted |= {(op, name) for op in OPS for name in ("misaligned", "strided", "rows=1", "rows>256",
                                                     "elements<=64K", "elements>64K")}
    wanted |= {(op, "gemma") for op in rms} | {(op, "epsilon=0") for op in rms}
    wanted |= {(op, "round_once") for op in ("rms_norm", "fused_add_rms_norm")}
    wanted |= {("layer_norm", "bias=None"), ("layer_norm_backward", "grad_bias=None")}
    wanted |= {("layer_norm", "rms"), ("rms_norm_backward", "grad_bias")}  # RMSNorm with a bias
    wanted |= {("rms_norm", "in_place=input"), ("layer_norm", "in_place=input")}
    wanted |= {(op, name) for op in backward for name in ("in_place=input", "in_place=grad_output",
                                                         "grad_dtype=float32", "rows_per_block", "own_workspace")}
    assert wanted - set(seen) == set()
    assert not any(c.op in layer and c.epsilon == 0 for c in cases)  # see draw_case: 0 * inf NaN bits
    assert sum(c.elements > 1 << 22 for c in cases) >= 1  # somewhere near 16 M elements


def test_every_element_offset_of_every_pointer_is_drawn(cases):
    seen = {(c.op, c.dtype, name, off) for c in cases for name, off in c.offsets}
    missing = []
    for op in OPS:
        for dtype in DTYPES:
            rows, vectors = operands(op)
            for name in (*rows, *vectors):
                missing += [(op, dtype, name, off) for off in range(16 // (4 if dtype == "float32" else 2))
                            if (op, dtype, name, off) not in seen]
    assert missing == []


def test_sizes_stay_in_range_mostly_small_a_few_big(cases):
    hidden = np.array([c.hidden for c in cases])
    elements = np.array([c.elements for c in cases])
    assert hidden.min() >= 1 and hidden.max() <= MAX_HIDDEN
    assert {1, MAX_HIDDEN} <= set(hidden.tolist())
    assert min(c.rows for c in cases) >= 1
    assert elements.max() <= MAX_ELEMENTS
    assert np.median(elements) <= 1 << 16
    assert np.median(hidden) <= 4096
    assert 1 <= (elements > 1 << 22).sum() <= COUNT // 200  # "a few": 0.5 % at most
    assert len(set(hidden.tolist()) & set(SPECIAL_HIDDENS)) > len(SPECIAL_HIDDENS) // 2


def test_offsets_strides_and_options_are_valid(cases):
    for c in cases:
        rows, vectors = operands(c.op, in_place=c.in_place, bias=c.bias, rms_bias=c.rms and c.op == "rms_norm_backward")
        assert [name for name, _ in c.offsets] == [*rows, *vectors], c.line()
        assert [name for name, _ in c.strides] == list(rows), c.line()
        for name, off in c.offsets:
            fp32 = c.dtype == "float32" or (name.startswith("grad_") and name != "grad_output"
                                            and name != "grad_input" and c.grad_dtype == "float32")
            assert 0 <= off < (4 if fp32 else 8), c.line()
        for _, stride in c.strides:
            assert stride == c.hidden or (stride > c.hidden and stride % 8), c.line()
        assert math.isfinite(c.epsilon) and c.epsilon >= 0, c.line()
        if c.rows_per_block is not None:
            assert c.rows_per_block == 1 or (c.rows_per_block > 0 and c.rows_per_block % bwd_plan.GRAD_CHUNK_ROWS == 0), c.line()
        backward = c.op.endswith("_backward")
        assert backward or (c.grad_dtype, c.rows_per_block, c.own_workspace) == (None, None, False), c.line()
        assert not c.gemma or "rms" in c.op, c.line()
        assert not c.rms or (c.op == "layer_norm" and c.bias) or (c.op == "rms_norm_backward" and not c.gemma), c.line()


def test_repro_line_round_trips(cases):
    for c in cases:
        line = c.line()
        assert "\n" not in line and "'" not in line  # one line, safe inside the repro's quotes
        assert Case.from_line(line) == c
        assert f"--case '{line}'" in random_check.repro(c)


@pytest.mark.parametrize("line, message", [
    ("seed=1 index=2 op=rms_norm", "lacks"),
    ("seed=1 colour=red", "cannot read 'colour=red'"),
    ("seed=1 gemma", "cannot read 'gemma'"),
])
def test_bad_repro_lines_are_refused(line, message):
    with pytest.raises(ValueError, match=message):
        Case.from_line(line)


def test_bad_bool_in_a_repro_line_is_refused():
    line = draw_case(1, 0).line() + " gemma=yes"
    with pytest.raises(ValueError, match="True or False"):
        Case.from_line(line)


def test_checker_arguments_fit_the_checkers(cases):
    for c in cases[:1000]:
        check, kwargs = testing.checker_call(c.case)
        inspect.signature(check).bind(None, stream=None, **kwargs)  # TypeError on a wrong keyword
        assert check.__name__ == {"rms_norm": "check_rms_norm", "fused_add_rms_norm": "check_fused_add_rms_norm",
                                  "layer_norm": "check_layer_norm"}.get(c.op, "check_norm_backward")


def test_compile_units_are_the_plans_groups(cases):
    units = {random_check.compile_unit(c) for c in cases}
    # rms_norm and fused add: dtype x gemma x round_once; layer_norm.cu: LayerNorm's and RMSNorm with a bias's,
    # per dtype; layer_norm_backward.cu and rms_norm_backward.cu (gemma and the bias in its group): one per dtype.
    assert len(units) == 3 * 4 + 3 * 4 + 3 * 2 + 3 + 3
    assert {source for source, _ in units} == {"rms_norm.cu", "fused_add_rms_norm.cu", "layer_norm.cu",
                                               "layer_norm_backward.cu", "rms_norm_backward.cu"}


# --- the checkers on the host: device memory as host memory, launches that write nothing ------------------


def _outputs(case: Case) -> set[str]:
    if case.op in ("rms_norm", "layer_norm"):
        return {"out"}
    if case.op == "fused_add_rms_norm":
        return {"input", "residual"}
    return {"grad_input", "grad_weight"} | ({"grad_bias"} if (case.bias if case.op == "layer_norm_backward" else case.rms)
                                            else set())


def test_a_launch_that_writes_nothing_fails_exactly_its_outputs(host_device):
    """Every drawn case goes through its checker as on the GPU. Each of its operands must be compared
    (an in-place one once, as the output), and with launches that write nothing the comparisons must
    flag each output and no input: the check is not vacuous, and the case's layout is the one run."""
    differences, compared = host_device
    for c in [c for c in draw_cases(11, 400) if c.elements <= 1 << 16][:150]:
        differences.clear()
        compared.clear()
        testing.check_case(random_check.data_rng(c), c.case)
        assert set(differences) == _outputs(c), c.line()
        named = {name for name, _ in c.offsets} - {c.in_place} | _outputs(c)
        assert set(compared) == named | ({"workspace"} if c.own_workspace else set()), c.line()
        assert set(compared.values()) == {1}, c.line()


# --- the runner ------------------------------------------------------------------------------------------


def _fail_some(case: Case) -> None:
    if case.index in (2, 5):
        raise AssertionError(f"out: 3 elements differ (case {case.index})")
    if case.index == 7:
        raise ValueError("a bug in the case")


def test_run_keeps_going_and_collects_failures_with_repro_lines():
    cases = draw_cases(5, 12)
    lines = []
    summary = random_check.run(cases, run_one=_fail_some, progress_every=4, log=lines.append)
    assert (summary["ran"], summary["passed"], summary["failed"]) == (12, 9, 3)
    assert [f["index"] for f in summary["failures"]] == [2, 5, 7]
    assert [Case.from_line(f["case"]) for f in summary["failures"]] == [cases[2], cases[5], cases[7]]
    assert "ValueError: a bug in the case" in summary["failures"][2]["error"]
    assert sum(line.startswith("FAIL python -m tools.random_check --case") for line in lines) == 3
    assert sum(line.startswith("random_check: ") for line in lines) == 3  # progress at 4, 8, 12
    assert sum(summary["op_dtype"].values()) == 12
    assert summary["features"] == dict(sorted(Counter(n for c in cases for n in features(c)).items()))


def test_run_stops_at_a_cuda_error():
    def sticky(case):
        if case.index == 3:
            raise errors.CudaError("cuLaunchKernel", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access")

    summary = random_check.run(draw_cases(5, 10), run_one=sticky, log=lambda *_: None)
    assert (summary["ran"], summary["failed"]) == (4, 1)
    assert "CudaError" in summary["stopped"]


def test_run_stops_at_the_time_limit():
    import time

    summary = random_check.run(draw_cases(5, 100), run_one=lambda case: time.sleep(0.02), time_limit=0.05,
                               log=lambda *_: None)
    assert 1 <= summary["ran"] < 100 and "time limit" in summary["stopped"]


def test_main_lists_cases_without_a_gpu(capsys):
    assert random_check.main(["--seed", "4", "--count", "3", "--list"]) == 0
    assert [Case.from_line(line) for line in capsys.readouterr().out.splitlines()] == draw_cases(4, 3)


def test_main_without_a_gpu_says_so(monkeypatch, capsys):
    from pyrms import driver

    monkeypatch.setattr(driver, "unavailable_reason", lambda: "no CUDA driver found: test")
    assert random_check.main(["--count", "1"]) == 2
    assert "no usable CUDA GPU: no CUDA driver found: test" in capsys.readouterr().err


def test_main_exit_status_summary_and_json(monkeypatch, tmp_path, capsys):
    from pyrms import driver

    monkeypatch.setattr(driver, "unavailable_reason", lambda: None)
    monkeypatch.setattr(random_check, "_environment", lambda: {"device": "none (test)"})
    monkeypatch.setattr(random_check, "execute", lambda case, streams: _fail_some(case))
    out = tmp_path / "summary.json"
    assert random_check.main(["--seed", "5", "--count", "9", "--out", str(out)]) == 1
    summary = json.loads(out.read_text())
    assert (summary["seed"], summary["ran"], summary["failed"]) == ([5], 9, 3)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("random_check: seed 5: 9 of 9 cases run, 6 passed, 3 failed")
    monkeypatch.setattr(random_check, "execute", lambda case, streams: None)
    assert random_check.main(["--seed", "5", "--count", "9"]) == 0
    assert random_check.main(["--seed", "5", "--index", "2", "--index", "5"]) == 0
    assert "2 of 2 cases run" in capsys.readouterr().out


def test_precompile_compiles_each_unit_once(monkeypatch, tmp_path):
    """The units go to the workers once each (here a thread pool and a stub compile: no NVRTC)."""
    import concurrent.futures

    calls = []
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYRMS_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(random_check, "_compile", lambda unit, arch: calls.append((unit, arch)) or "none")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor",
                        lambda workers, mp_context: concurrent.futures.ThreadPoolExecutor(workers))
    from pyrms import compiler

    cases = draw_cases(5, 200)

    monkeypatch.setattr(compiler, "resolve_arch", lambda arch=None: "sm_90")
    random_check.precompile(cases, 4, log=lambda *_: None)
    assert sorted(unit for unit, _ in calls) == sorted({random_check.compile_unit(c) for c in cases})
    assert {arch for _, arch in calls} == {"sm_90"}
