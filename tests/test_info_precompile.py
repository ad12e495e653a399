"""``python -m pyrms.info`` and ``python -m pyrms.precompile`` on the CPU: the report without a GPU
(with the reason) and with a fake one; the enumeration of every compile unit; compiling ahead for an
explicit arch into the cache that launches read."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_driver import FakeDriver, fresh_driver_state
from pyrms import cache, compiler, driver, dtypes, errors, info, precompile
from pyrms.ops import registry
from pyrms.ops.seed import plan_seed
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops.rms_norm_quant import plan as quant_plan
from tests.support.child_env import child_env

ROOT = Path(__file__).resolve().parent.parent


class NoDeviceDriver(FakeDriver):
    """A driver library that loads but whose cuInit fails, as on a machine without a GPU."""

    def cuInit(self, flags):
        return (self.CUresult.CUDA_ERROR_NO_DEVICE,)

    def cuDriverGetVersion(self):
        return (self.CUresult.CUDA_ERROR_NOT_INITIALIZED, 0)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Nothing here reads or writes the user's cache (the small fixture points it elsewhere again)."""
    monkeypatch.setenv("PYRMS_CACHE_DIR", str(tmp_path / "own-cache"))


# --- pyrms.info -----------------------------------------------------------------------------------


def test_info_without_a_gpu_prints_the_reason(monkeypatch, capsys):
    fresh_driver_state(monkeypatch.setattr, NoDeviceDriver())
    monkeypatch.delenv("PYRMS_ARCH", raising=False)
    monkeypatch.setenv("PYRMS_QUIET", "0")
    assert info.main([]) == 0
    out = capsys.readouterr().out
    assert "no usable GPU: no CUDA driver found: cuInit failed: CUDA_ERROR_NO_DEVICE" in out, out
    assert "version:                  none" in out
    assert "compiles for:             none: no GPU to ask and PYRMS_ARCH is unset" in out
    assert f"directory:                {cache.directory()}" in out
    assert "PYRMS_QUIET:              '0' (off)" in out
    assert "PYRMS_ARCH:               (unset)" in out
    for name in ("CUDA_HOME", "CUDA_PATH", "XDG_CACHE_HOME", "PYRMS_DISABLE_CACHE", "PYRMS_CACHE_DIR"):
        assert f"  {name}:" in out
    assert f"numpy:                    {__import__('numpy').__version__}" in out


def test_info_with_a_fake_gpu_lists_it(monkeypatch, capsys):
    fresh_driver_state(monkeypatch.setattr, FakeDriver(device_count=2))
    monkeypatch.setenv("PYRMS_ARCH", "90")
    assert info.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["driver"]["version"] == "13.0" and "unavailable" not in report["driver"]
    assert [(d["ordinal"], d["name"], d["arch"]) for d in report["driver"]["devices"]] == \
        [(0, "Fake H200", "sm_90"), (1, "Fake H200", "sm_90")]
    assert report["arch"] == "sm_90 (PYRMS_ARCH)"
    assert report["nvrtc"]["version"] == ".".join(map(str, compiler.nvrtc_version()))
    assert report["environment"]["PYRMS_ARCH"] == "90"
    assert set(report["headers"]) == {"cccl", "cudart"}


def test_info_survives_a_missing_piece(monkeypatch, capsys):
    """A failing probe is reported in its place; the rest is still printed."""
    from pyrms import headers

    fresh_driver_state(monkeypatch.setattr, NoDeviceDriver())

    def broken(name, major):
        raise errors.HeaderNotFoundError(f"CUDA headers '{name}' not found")

    monkeypatch.setattr(headers, "find", broken)
    assert info.main([]) == 0
    out = capsys.readouterr().out
    assert "cccl:                     unavailable: HeaderNotFoundError: CUDA headers 'cccl' not found" in out
    assert "Kernel cache" in out


def test_info_command_runs_here(tmp_path):
    """The real command in a fresh process, whatever this machine has: it reports the driver as
    pyrms.driver sees it here (the reason where there is no GPU)."""
    env = child_env(PYRMS_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "pyrms.info", "--json"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    reason = driver.unavailable_reason()
    assert report["driver"].get("unavailable") == reason
    assert bool(report["driver"]["devices"]) == (reason is None)
    assert report["cache"]["directory"] == str(tmp_path)
    assert report["package"] == str(ROOT / "pyrms")


# --- pyrms.precompile: the units ------------------------------------------------------------------


@pytest.mark.slow  # about a million plans (1.5 min on 2 cores)
def test_every_unit_covers_every_hidden_size_and_option():
    """Whatever hidden size a call has, the unit it compiles is one every_unit lists (so that
    precompiling really covers every pyrms kernel)."""
    listed = set(precompile.every_unit(seed_hiddens=()))
    hiddens = sorted({*range(1, 1100), *range(1100, 140000, 97), 4096, 5120, 8192, 16384, 32768, 65536, 131072})
    for op in precompile.OPS[:-1]:
        for dt in dtypes.ALL:
            for options in registry.get(op).option_sets(dt):
                for hidden in hiddens:
                    if options.get("mode") == "per_group":
                        try:  # hidden sizes no group fits compile nothing; the others the one per_group unit
                            quant_plan.plan_rms_norm_quant(dt, hidden, "int8", mode="per_group",
                                                     group=128 if hidden % 128 == 0 else 64)
                        except ValueError:
                            continue
                    assert precompile.unit(op, dt, hidden, **options) in listed, (op, dt.name, hidden, options)


def test_units_are_what_the_ops_compile():
    p = rms_plan.plan_rms_norm(dtypes.BFLOAT16, 5120, gemma=True)
    u = precompile.unit("rms_norm", "bf16", 5120, gemma=True)
    assert (u.source, u.names) == (p.source, p.group) and str(u) == "rms_norm.cu bfloat16 gemma"
    b = bwd_plan.plan_norm_backward(dtypes.FLOAT16, 769, centered=True, grad_dtype="float32")
    u = precompile.unit("layer_norm_backward", "fp16", 769, grad_dtype="float32")
    assert (u.source, u.names) == (b.source, b.group) and u.source == "layer_norm_backward.cu"
    f = precompile.unit("layer_norm", "fp16", 5, bias=False)  # one layer_norm.cu unit per dtype, with and without bias
    assert f == precompile.unit("layer_norm", "fp16", 4096) and f.source == "layer_norm.cu"
    # ... and one without a weight, each (its backward's with or without grad_bias)
    none = precompile.unit("layer_norm_backward", "fp16", 769, weight_dtype="none")
    assert none != u and precompile.unit("layer_norm", "fp16", 5, weight_dtype="none") != f
    assert none.names == bwd_plan.plan_norm_backward("fp16", 769, centered=True, weight=False, grad_bias=False).group
    with pytest.raises(ValueError, match="rms_norm has no mode, got mode='per_token'"):
        precompile.unit("rms_norm", "bf16", 8, mode="per_token")
    assert precompile.unit("rms_norm", "bf16", 8, mode="static", bias=True) == precompile.unit("rms_norm", "bf16", 8)
    w = precompile.unit("rms_norm_backward", "bf16", 5120, weight_dtype="none")
    assert w.names == bwd_plan.plan_norm_backward("bf16", 5120, weight=False).group and str(w) == \
        "rms_norm_backward.cu bfloat16 weight=none"
    fp32 = precompile.unit("rms_norm_backward", "bf16", 5120, weight_dtype="float32")  # fp32 master weights
    assert fp32.names == bwd_plan.plan_norm_backward("bf16", 5120, weight_dtype="float32").group and str(fp32) == \
        "rms_norm_backward.cu bfloat16 weight=float32"
    assert fp32 == precompile.unit("rms_norm_backward", "bf16", 8, weight_dtype="float32", grad_output_dtype="float32")
    with pytest.raises(ValueError, match="rms_norm_backward's weight is of the dtype, float32 or none, got "
                                         "weight_dtype='float16'"):
        precompile.unit("rms_norm_backward", "bf16", 8, weight_dtype="float16")
    s = plan_seed(dtypes.BFLOAT16, 5120)
    assert precompile.unit("seed_rms_norm", "bf16", 5120).names == (s.expression,)
    with pytest.raises(ValueError, match="1024 a block allows"):
        precompile.unit("seed_rms_norm", "float32", 5120)
    with pytest.raises(ValueError, match="unknown op 'rms'"):
        precompile.unit("rms", "bf16", 8)


def test_every_unit_counts():
    units = precompile.every_unit()
    assert len(units) == len(set(units))
    by_source = {}
    for u in units:
        by_source[u.source] = by_source.get(u.source, 0) + 1
    # rms_norm and fused add: per dtype, gemma x round_once with the dtype's weight and with an fp32 one
    # (bf16 and fp16 only), and round_once without a weight: 4 + 4 + 2 for 2-byte dtypes, 4 + 2 for
    # fp32. LayerNorm's forward: one per dtype, and one per dtype without a weight; its backward and the
    # RMSNorm backward: the same, and one with an fp32 weight per 2-byte dtype; the seed at 5120 in bf16 and
    # fp16 (fp32 would need 1280 threads).
    # rms_norm.cu twice over: its plain rows and its N-D kernel (rms_norm_nd), one unit each. The
    # quantizing ops: per op, dtype, output dtype (3), mode (3: per_group's one unit for both group sizes),
    # rounding (2) and norm_out (2): 2 x 3 x 3 x 3 x 2 x 2, and the quantizing fused add's bf16 and fp16 units
    # again with the fp32 sum (2 x 3 x 3 x 2 x 2). Fused add's bf16 and fp16 units three times over (the rounded
    # sum, the fp32 sum, an fp32 residual): 3 x 2 x 10 + 6 for fp32, whose sum is never rounded.
    # Mixed dtypes: each 2-byte rms_norm, N-D and fused-add (rounded sum only) unit again with an fp32
    # output (10 per dtype each); LayerNorm's forward with fp32 weight and bias, and with an fp32 output for
    # each weight kind (4 per dtype), and every LayerNorm unit again as RMSNorm with a bias (rms). static_quant and
    # dynamic_quant: one per dtype and output dtype each (3 x 3; dynamic_quant's every mode in it). qk_norm_rope: one
    # per dtype, gemma, is_neox and kv_cache (3 x 2 x 2 x 2; kv_cache's holds both cache dtypes). layer_norm_quant
    # (layer_norm.cu too): per dtype, output dtype (3), weight kind (3 for 2-byte dtypes, 2 for fp32), bias and
    # round_input: 3 x 8 x 2 x 2 = 96. gated_rms_norm: one per dtype, norm_before_gate and weight kind (2 x 2 x 3 +
    # 2 x 2 for fp32, which has no fp32 weight kind); its backward one per dtype and weight kind (both orders in each).
    assert by_source == {"rms_norm.cu": 92, "fused_add_rms_norm.cu": 86, "layer_norm.cu": 28 + 96,
                         "layer_norm_backward.cu": 8, "rms_norm_backward.cu": 8, "seed_rms_norm.cu": 2, "rms_norm_quant.cu": 288,
                         "static_quant.cu": 9, "dynamic_quant.cu": 9, "qk_norm_rope.cu": 24, "gated_rms_norm.cu": 16,
                         "gated_rms_norm_backward.cu": 8}
    assert "rms_norm_quant.cu rms_norm_group_quant_kernel bfloat16 float8_e4m3fn per_group" in {u.label for u in units}
    assert "rms_norm_quant.cu fused_add_rms_norm_quant_kernel float16 int8 per_token norm_out fp32_sum" in \
        {u.label for u in units}
    assert precompile.every_unit(["rms_norm", "rms_norm_nd"], [dtypes.FLOAT32]) == \
        [u for u in units if u.label.startswith("rms_norm.cu float32")]
    assert "rms_norm.cu bfloat16 nd weight=none" in {u.label for u in units}
    assert {"rms_norm.cu bfloat16 weight=none", "rms_norm_backward.cu bfloat16 weight=none"} <= {u.label for u in units}
    assert {"fused_add_rms_norm.cu float16 fp32_sum", "fused_add_rms_norm.cu bfloat16 round_once fp32_sum "
            "residual=float32"} <= {u.label for u in units}


def test_cover_lists_fewer_units(capsys):
    assert precompile.main(["--list", "--cover", "--ops", "static_quant"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["static_quant.cu bfloat16 float8_e4m3fn: 1 kernel", "static_quant.cu float16 float8_e5m2: 1 kernel",
                   "static_quant.cu float32 int8: 1 kernel",
                   "precompile: 3 compile units (covering every kernel template and template argument)"]


def test_list_compiles_nothing(capsys, monkeypatch):
    monkeypatch.setattr(precompile, "compile_units", None)  # would fail if called
    assert precompile.main(["--list", "--ops", "layer_norm,seed_rms_norm", "--dtypes", "bf16",
                            "--seed-hidden", "769,4096"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["layer_norm.cu bfloat16: 28 kernels", "layer_norm.cu bfloat16 out=float32: 28 kernels",
                   "layer_norm.cu bfloat16 rms: 14 kernels", "layer_norm.cu bfloat16 rms out=float32: 14 kernels",
                   "layer_norm.cu bfloat16 rms weight=float32: 14 kernels",
                   "layer_norm.cu bfloat16 rms weight=float32 out=float32: 14 kernels",
                   "layer_norm.cu bfloat16 rms weight=none: 14 kernels",
                   "layer_norm.cu bfloat16 rms weight=none out=float32: 14 kernels",
                   "layer_norm.cu bfloat16 weight=float32: 28 kernels",
                   "layer_norm.cu bfloat16 weight=float32 out=float32: 28 kernels",
                   "layer_norm.cu bfloat16 weight=none: 28 kernels", "layer_norm.cu bfloat16 weight=none out=float32: 28 kernels",
                   "seed_rms_norm.cu bfloat16 hidden 4096: 1 kernel", "seed_rms_norm.cu bfloat16 hidden 769: 1 kernel",
                   "precompile: 14 compile units"]


# --- pyrms.precompile: compiling ------------------------------------------------------------------


def test_compile_units_reports_each_and_caches(small, capsys):
    units = [precompile.Unit("small.cu", ("k<1>", "k<2>"), "small.cu ones"), precompile.Unit("bad.cu", ())]
    lines = []
    results = precompile.compile_units(units, "sm_90", jobs=1, progress=lines.append)
    assert [r.outcome for r in results] == ["compiled", "failed"]
    assert re.fullmatch(r"  \[1/2\] small.cu ones: compiled in [0-9.]+ s; 0:0[0-9] elapsed, about [0-9]+ s left",
                        lines[0]), lines[0]
    assert re.match(r"  \[2/2\] bad.cu \(0 kernels\): FAILED; 0:0[0-9] elapsed\n    CompileError: ", lines[1]), lines[1]
    assert "undefined_name" in lines[1]
    assert capsys.readouterr().err == ""  # the compiler's own slow-compile line is left out
    compiler.clear_memory_cache()
    again = precompile.compile_units(units[:1], "sm_90", jobs=1, progress=lines.append)
    assert again[0].outcome == "cached" and re.fullmatch(r"  \[1/1\] small.cu ones: already cached; 0:0[0-9] elapsed",
                                                         lines[-1]), lines[-1]
    # what a launch compiles now comes from the disk
    compiler.clear_memory_cache()
    assert compiler.compile_source("small.cu", arch="sm_90", name_expressions=("k<1>", "k<2>")).from_cache == "disk"
    text = precompile.summary(results, "sm_90", 1.25, 1)
    assert text == (f"precompile: 2 compile units for sm_90 (1 compiled, 0 already cached, 1 failed) in 1.2 s "
                    f"with 1 processes; cache {cache.directory()}")


def test_syntax_only_runs_the_front_end_and_caches_nothing(small):
    if compiler.nvrtc_version() < precompile.SYNTAX_ONLY_NVRTC:
        pytest.skip("this NVRTC has no -fdevice-syntax-only (test_syntax_only_is_refused_before_nvrtc_12_4)")
    units = [precompile.Unit("small.cu", ("k<1>",), "small.cu one"), precompile.Unit("bad.cu", ())]
    lines = []
    results = precompile.compile_units(units, "sm_90", progress=lines.append, syntax_only=True)
    assert [r.outcome for r in results] == ["checked", "failed"] and "undefined_name" in results[1].error
    assert re.match(r"  \[1/2\] small.cu one: front end passed in [0-9.]+ s; 0:0[0-9] elapsed", lines[0]), lines[0]
    assert cache.entries() == []
    assert precompile.summary(results, "sm_90", 2.0, 1) == \
        "precompile: 2 compile units for sm_90 (1 passed NVRTC's front end, 1 failed) in 2.0 s with 1 processes"


def test_syntax_only_is_refused_before_nvrtc_12_4(small, monkeypatch, capsys):
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: (12, 3))
    units = [precompile.Unit("small.cu", ("k<1>",), "small.cu one")]
    with pytest.raises(ValueError, match=r"needs NVRTC 12\.4 or later \(its -fdevice-syntax-only\), and this NVRTC is "
                                         r"12\.3: compile fully instead"):
        precompile.compile_units(units, "sm_90", progress=None, syntax_only=True)
    assert precompile.main(["--syntax-only", "--arch", "sm_90", "--ops", "static_quant"]) == 2
    assert "(leave out --syntax-only)" in capsys.readouterr().err
    monkeypatch.setattr(compiler, "nvrtc_version", lambda: (12, 4))
    precompile.check_syntax_only()  # from 12.4 on: no error


def test_cover_instantiates_every_template_argument_in_fewer_units():
    units = precompile.every_unit()
    chosen = precompile.cover(units)
    every = set().union(*(precompile._template_arguments(e) for u in units for e in u.names))
    assert set().union(*(precompile._template_arguments(e) for u in chosen for e in u.names)) == every
    assert set(chosen) <= set(units) and len(chosen) < len(units) / 5
    assert {u.source for u in chosen} == {u.source for u in units}
    assert precompile._template_arguments("pyrms::k<float, Vec<float, 4>, true>") == {
        ("pyrms::k",), ("pyrms::k", 0, "float"), ("pyrms::k", 1, "Vec<float, 4>"), ("pyrms::k", 2, "true")}
    assert precompile.cover([]) == []


def test_time_left_counts_the_wall_time_per_unit_done():
    unit = precompile.Unit("x.cu", ("k",))
    compiled, cached = precompile.Result(unit, "compiled", 5.0, ""), precompile.Result(unit, "cached", 0.0, "")
    assert precompile.time_left([cached, cached], 10, 0.1) == ""  # only hits so far: nothing to go by
    assert precompile.time_left([compiled, cached], 10, 8.0) == "about 32 s left"  # 4 s a unit, 8 to go
    assert precompile.time_left([compiled] * 4, 400, 20.0) == "about 33 min left"
    assert precompile.time_left([compiled] * 3, 3, 9.0) == ""  # the last one
    assert precompile.time_left([compiled] * 99, 100, 10.0) == "about 1 s left"  # never "about 0 s"
    assert [precompile.clock(t) for t in (0.4, 59.9, 61, 3599, 3661)] == ["0:00", "0:59", "1:01", "59:59", "1:01:01"]


def test_without_an_arch_or_a_gpu_it_says_what_to_pass(monkeypatch, capsys):
    monkeypatch.delenv("PYRMS_ARCH", raising=False)
    monkeypatch.delenv("PYRMS_DISABLE_CACHE", raising=False)

    def no_gpu():
        raise errors.NoDriverError("no CUDA driver found: none in this test")

    monkeypatch.setattr(driver, "current_device", no_gpu)
    assert precompile.main(["--ops", "seed_rms_norm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("precompile: no GPU to take the arch from (no CUDA driver found: none in this test); "
                          "pass --arch (e.g. --arch sm_90) or set PYRMS_ARCH"), err


def test_refusals(monkeypatch, capsys):
    monkeypatch.setenv("PYRMS_DISABLE_CACHE", "1")
    assert precompile.main(["--arch", "sm_90"]) == 2
    assert "PYRMS_DISABLE_CACHE is set" in capsys.readouterr().err
    monkeypatch.delenv("PYRMS_DISABLE_CACHE")
    assert precompile.main(["--arch", "sm_1"]) == 2
    assert "arch 'sm_1' is not a CUDA arch" in capsys.readouterr().err
    for argv, fragment in ((["--ops", "rms"], "unknown op(s) ['rms']"), (["--dtypes", "int8"], "dtype 'int8' is not"),
                           (["--jobs", "0"], "processes >= 1"), (["--seed-hidden", "x"], "sizes >= 1")):
        with pytest.raises(SystemExit):
            precompile.main(argv)
        assert fragment in capsys.readouterr().err


def test_precompile_command_with_pyrms_arch(tmp_path, monkeypatch, capsys):
    """The command in a fresh process, no GPU needed: three static_quant units (the quickest to compile) in two
    NVRTC processes, progress on stderr and the summary on stdout, into the cache where a launch then finds them
    (the run again here: all cached)."""
    env = child_env(PYRMS_CACHE_DIR=str(tmp_path), PYRMS_ARCH="sm_90")
    for name in ("PYRMS_DISABLE_CACHE", "PYRMS_QUIET"):
        env.pop(name, None)
    argv = ["--ops", "static_quant", "--dtypes", "fp32", "--jobs", "2"]
    done = subprocess.run([sys.executable, "-m", "pyrms.precompile", *argv], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    progress = done.stderr.splitlines()
    assert progress[0] == f"precompile: 3 compile units for sm_90, 2 processes, into {tmp_path}"
    assert sorted(line.split("] ", 1)[1].split(":")[0] for line in progress[1:]) == \
        [f"static_quant.cu float32 {q}" for q in ("float8_e4m3fn", "float8_e5m2", "int8")]
    assert re.fullmatch(r"  \[1/3\] .*: compiled in [0-9.]+ s; [0-9]:[0-9]{2} elapsed, about [0-9]+ s left", progress[1])
    assert done.stdout.startswith("precompile: 3 compile units for sm_90 (3 compiled, 0 already cached, 0 failed) in ")
    assert len(list(tmp_path.glob("*.cubin"))) == 3
    for name, value in env.items():
        if name.startswith("PYRMS_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYRMS_QUIET", "1")
    assert precompile.main([*argv[:-1], "1"]) == 0  # one process: this one, which reads the cache
    out, err = capsys.readouterr()
    assert err == "" and "(0 compiled, 3 already cached, 0 failed)" in out


def test_quiet_precompile_prints_only_failures_and_the_summary(monkeypatch, capsys):
    unit = precompile.Unit("x.cu", ("k",), "x.cu float32")
    monkeypatch.setattr(precompile, "every_unit", lambda *a, **k: [unit])
    monkeypatch.setattr(precompile, "compile_units", lambda units, arch, jobs, progress, syntax_only: [
        precompile.Result(unit, "failed", 0.5, "CompileError: x.cu(1): error: nope")])
    monkeypatch.setenv("PYRMS_QUIET", "1")
    monkeypatch.delenv("PYRMS_DISABLE_CACHE", raising=False)
    assert precompile.main(["--arch", "sm_90"]) == 1
    out, err = capsys.readouterr()
    assert err == "precompile: x.cu float32 FAILED\n    CompileError: x.cu(1): error: nope\n"
    assert out.startswith("precompile: 1 compile units for sm_90 (0 compiled, 0 already cached, 1 failed)")


def test_unit_flags_come_from_the_plans(monkeypatch):
    """The units' option flags are their plan's FLAGS: listed, enumerated (each on and off), labelled, and
    refused by name where an op has no such flag; a flag a plan drops is gone from precompile too."""
    assert precompile.flags("rms_norm_quant") == quant_plan.RmsNormQuantPlan.FLAGS == ("round_input", "norm_out")
    assert precompile.flags("fused_add_rms_norm") == ("gemma", "round_once") and precompile.flags("layer_norm") == ()
    u = precompile.unit("fused_add_rms_norm_quant", "bf16", 5120, mode="per_token", norm_out=True)
    assert str(u) == "rms_norm_quant.cu fused_add_rms_norm_quant_kernel bfloat16 float8_e4m3fn per_token norm_out"
    assert quant_plan.plan_rms_norm_quant("bf16", 5120, "float8_e4m3fn", mode="per_token", residual=True,
                                    norm_out=True).expression in u.names
    with pytest.raises(TypeError, match="layer_norm has no option 'gemma'; its flags: none"):
        precompile.unit("layer_norm", "bf16", 64, gemma=True)
    with pytest.raises(TypeError, match="rms_norm_quant has no option 'gemma'; its flags: round_input, norm_out"):
        precompile.unit("rms_norm_quant", "bf16", 64, gemma=False)
    assert len(registry.get("rms_norm_quant").option_sets(dtypes.BFLOAT16)) == 3 * 3 * 4
    monkeypatch.setattr(quant_plan.RmsNormQuantPlan, "FLAGS", ("round_input",))
    assert len(registry.get("rms_norm_quant").option_sets(dtypes.BFLOAT16)) == 3 * 3 * 2
