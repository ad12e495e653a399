"""tools/sanitizer_summary.py and the CPU side of tools/sanitize_all.py: how a run directory is read
(passed, failed, stopped part-way), and the matrix's selection and sharding. No GPU needed."""
import importlib.util
from pathlib import Path

import pytest
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops.rms_norm_quant import plan as quant_plan

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _load(name):
    return importlib.import_module(f"tools.{name}")


@pytest.fixture(scope="module")
def summary():
    return _load("sanitizer_summary")


@pytest.fixture(scope="module")
def sanitize_all():
    return _load("sanitize_all")


def _shard(directory: Path, name: str, log: str, rc: int, seconds: int = 10):
    (directory / f"{name}.log").write_text(log)
    (directory / f"{name}.rc").write_text(f"{rc}\n")
    (directory / f"{name}.seconds").write_text(f"{seconds}\n")


PASSED_MEMCHECK = ("sanitize_all: 10 launches checked, 0 failed (14 kernel launches, full matrix, shard 0/2, ops x, 1.0 s)\n"
                   "========= ERROR SUMMARY: 0 errors\n")
PASSED_RACECHECK = ("sanitize_all: 7 launches checked, 0 failed (9 kernel launches, full matrix, shard 0/1, ops x, 1.0 s)\n"
                    "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")


def test_passing_run_is_summed_over_shards(summary, tmp_path):
    _shard(tmp_path, "memcheck.0", PASSED_MEMCHECK, 0, 30)
    _shard(tmp_path, "memcheck.1", PASSED_MEMCHECK, 0, 40)
    _shard(tmp_path, "racecheck.0", PASSED_RACECHECK, 0)
    lines, tools, ok = summary.summarize(tmp_path)
    assert ok
    assert tools["memcheck"]["launches"] == 20 and tools["memcheck"]["kernel_launches"] == 28
    assert tools["memcheck"]["seconds"] == 40
    assert tools["racecheck"]["launches"] == 7 and tools["racecheck"]["errors"] == 0
    assert lines[-1] == "TOTAL: 2 tools, 27 launches checked, 0 failed, 0 sanitizer errors -> PASS"


def test_stopped_shard_fails_and_says_how_far_it_got(summary, tmp_path):
    _shard(tmp_path, "racecheck.0", PASSED_RACECHECK, 0)
    progress = ("  [12 s] 25 launches: rms_norm 20, layer_norm 5\n  slow: 4.9 s layer_norm_backward {}\n"
                "  [40 s] 50 launches: rms_norm 40, layer_norm 10\n")
    _shard(tmp_path, "racecheck.1", progress, 124, 170)
    lines, tools, ok = summary.summarize(tmp_path)
    assert not ok and not tools["racecheck"]["pass"]
    assert tools["racecheck"]["launches"] is None  # one shard never said how many it checked
    stopped = next(line for line in lines if line.startswith("  racecheck.1:"))
    assert "its last progress line: 50 launches after 40 s (rms_norm 40, layer_norm 10)" in stopped
    assert "timed out (exit 124)" in stopped
    assert lines[-1].endswith("-> FAIL")


def test_sanitizer_errors_and_failed_checks_fail(summary, tmp_path):
    _shard(tmp_path, "memcheck.0", PASSED_MEMCHECK.replace("0 errors", "2 errors"), 3)
    _shard(tmp_path, "initcheck.0", "FAIL rms_norm {...}: 3 elements differ\n" + PASSED_MEMCHECK.replace("0 failed", "1 failed"), 1)
    lines, tools, ok = summary.summarize(tmp_path)
    assert not ok
    assert tools["memcheck"]["errors"] == 2 and tools["initcheck"]["failed"] == 1
    text = "\n".join(lines)
    assert "2 sanitizer errors" in text and "exit status 3" in text
    assert "1 checks failed" in text and "FAIL rms_norm {...}: 3 elements differ" in text


def test_empty_directory_fails(summary, tmp_path):
    lines, tools, ok = summary.summarize(tmp_path)
    assert not ok and tools == {} and "no TOOL.K.log files" in lines[0]


def test_shards_partition_the_matrix(sanitize_all):
    everything = [(op, repr(case)) for op, case in sanitize_all.select(sanitize_all.OPS, quick=False)]
    shards = [[(op, repr(case)) for op, case in sanitize_all.select(sanitize_all.OPS, quick=False, shard=(k, 11))]
              for k in range(11)]
    assert sorted(sum(shards, [])) == sorted(everything)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    # 156 of them rms_norm_nd's, 105 the weightless backward's, 1410 the quantizing ops' (470 per group, 132 with a norm_out,
    # 60 the fused add's fp32 sum: 2 dtypes x 3 modes x 10), 56
    # fused add's fp32 sum and fp32 residual (2 dtypes x 7 hidden sizes x 2 launch shapes x 2 semantics), 224
    # the mixed dtypes' (2 dtypes x 7 hidden sizes x 2 shapes x (3 + 3 + 1 + 1): an fp32 out with each weight
    # kind for rms_norm and layer_norm, fused add's fp32 out, LayerNorm's fp32 gamma/beta); each case once (the
    # separate tools' matrix had the aligned case once per pointer: 483 repeats then), 234 static_quant's, 411 dynamic_quant's, 112
    # the backward's fp32 weight's (2 ops x 2 dtypes x 7 hidden sizes x 2 layouts x 2 grad_output dtypes), 182
    # RMSNorm with a bias (3 dtypes x 7 hidden sizes x 5 forward and 3 backward cases, and 2 x 7 with fp32 parameters),
    # 358 qk_norm_rope's (102 of them with the KV cache: 3 dtypes x 34), 280 layer_norm_quant's (3 dtypes x 7
    # hidden sizes x 2 shapes x 7 cases, 6 for fp32), 411 dynamic_quant's, 700 gated_rms_norm's, 670 its backward's.
    assert len(everything) == len(set(everything)) == 7305 + 102 + 280 + 411 + 700 + 670
    for shard in shards:  # interleaved: every process gets some of each family op, not one op's slow cases
        assert {op for op, _ in shard} >= set(sanitize_all.OPS) - {"seed_rms_norm"}


def test_backward_cases_without_weight(sanitize_all):
    """Both backward passes without a weight are in the matrix, each dtype and hidden size, with the
    kernels they launch counted and the unit they compile named (the weightless kernels' own; RMSNorm's with a
    bias sums its grad_bias too)."""
    from pyrms import dtypes

    from tests.support import case_matrix

    cases = [(op, case) for op, case in sanitize_all.select(case_matrix.BACKWARD, quick=False)
             if case.option("weight") == "none"]
    assert {(op, case.dtype, case.hidden) for op, case in cases} == {
        (op, dt.name, hidden) for op in case_matrix.BACKWARD for dt in dtypes.ALL
        for hidden in case_matrix.SANITIZE_HIDDENS}
    for op, case in cases:
        layer_norm = op == "layer_norm_backward"
        grad_bias = case.option("grad_bias") if layer_norm else case.option("rms_bias")
        assert sanitize_all.kernels_per_call(case) == 1 + grad_bias
        p = bwd_plan.plan_norm_backward(case.dtype, case.hidden, centered=layer_norm, weight=False,
                                    grad_bias=grad_bias)
        assert p.expression in sanitize_all.compile_unit(op, case).names
    assert {sanitize_all.kernels_per_call(case) for op, case in cases} == {1, 2}


def test_every_case_compiles_the_unit_it_launches(sanitize_all):
    """Each case's unit holds the name expression its launch looks up, whatever flags it sets (its op's
    plan flags, pyrms.precompile.flags): the quantizing ops' norm_out and round_input (and the fused add's
    sum_precision, an option of its own), rms_norm's gemma and round_once. A flag the compile step dropped would compile the other unit, and each sanitizer shard its own
    copy of the right one under the tool."""

    seen = set()
    for op, case in sanitize_all.select(("rms_norm", "rms_norm_quant", "fused_add_rms_norm_quant"), quick=True):
        if op == "rms_norm":
            p = rms_plan.plan_rms_norm(case.dtype, case.hidden, gemma=case.option("gemma"),
                                   round_once=case.option("round_once"))
            if case.option("weight") != "same" or case.option("out_kind") != "same":
                continue
        else:
            fused = op == "fused_add_rms_norm_quant"
            p = quant_plan.plan_rms_norm_quant(case.dtype, case.hidden, case.option("out_dtype"), mode=case.option("mode"),
                                         round_input=case.option("round_input"), norm_out=case.option("norm_out"),
                                         residual=fused, group=case.option("group_size"),
                                         sum_precision=case.option("sum_precision") if fused else None)
            seen.add((case.option("norm_out"), p.sum_precision if fused else None))
        assert p.expression in sanitize_all.compile_unit(op, case).names, (op, case)
    assert {norm_out for norm_out, _ in seen} == {False, True} and (True, "fp32") in seen and (False, "fp32") in seen


def test_every_family_case_has_a_unit_precompile_knows(sanitize_all):
    """Every case of every family (the full matrix's options, quick's pointers) names a unit, and one that
    `python -m pyrms.precompile` compiles too: an option of a case that its op's unit does not take (dynamic_quant's
    mode, which picks a kernel of one unit) or a flag that shares an option's name (layer_norm_quant's bias) once
    stopped the sanitizers' precompile step before any launch. The seed's units are per hidden size, the
    matrix's sizes, not precompile's."""
    from pyrms import precompile

    known = set(precompile.every_unit())
    for op in sanitize_all.OPS:
        units = {sanitize_all.compile_unit(op, case) for _, case in sanitize_all.select([op], quick=True)}
        assert units, op
        if op != "seed_rms_norm":
            assert units <= known, (op, sorted(u.label for u in units - known))
