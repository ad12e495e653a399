"""pyrms.bench's norms after a GEMM, in a CUDA graph, without a GPU: which problems it times, the schedule of its
samples and the arithmetic of its per-norm figure (on fake timings), its sampler and capture (on stand-ins), its
report and JSON, and its command line."""
import contextlib
import datetime
import json
import types

import pytest

from pyrms.bench import after_gemm, cli, config, ops, report
from pyrms.bench.results import FAILED, OK, SKIPPED, AfterGemm


def parse(*argv):
    return cli.build_config(cli.build_parser().parse_args(list(argv)), now=datetime.datetime(2026, 1, 2, 3, 4, 5))


# -- what it times ----------------------------------------------------------------------------------

def test_problems_are_the_runs_shapes_of_few_enough_tokens():
    cfg = parse("--shapes", "1x4096,32x4096,128x5120,129x5120,4096x8192", "--ops", "rms_norm,fused_add",
                "--dtypes", "bf16,fp16")
    got = after_gemm.problems(cfg)
    shapes = [config.Shape(1, 4096), config.Shape(32, 4096), config.Shape(128, 5120)]
    assert got == [(op, dtype, s) for op in ("rms_norm", "fused_add_rms_norm") for dtype in ("bfloat16", "float16")
                   for s in shapes]
    wide = parse("--shapes", "1x4096,4096x8192", "--ops", "rms_norm", "--after-gemm-tokens", "4096")
    assert after_gemm.problems(wide) == [("rms_norm", "bfloat16", config.Shape(1, 4096)),
                                         ("rms_norm", "bfloat16", config.Shape(4096, 8192))]
    assert after_gemm.problems(parse("--shapes", "256x4096", "--ops", "rms_norm")) == []


def test_a_default_run_times_the_decode_shapes_of_every_op_it_runs():
    cfg = parse()
    got = after_gemm.problems(cfg)
    assert {s.tokens for _, _, s in got} == {t for t in config.TOKENS if t <= config.DECODE_MAX_TOKENS}
    assert {op for op, _, _ in got} == {op for op in cfg.ops if any(s.tokens <= 128 for s in cfg.shapes_for(op))}
    assert cfg.after_gemm and cfg.after_gemm_tokens == config.DECODE_MAX_TOKENS and cfg.gemm_k is None


def test_the_gemm_writes_the_first_array_the_op_reads():
    assert after_gemm.gemm_output(ops.get("rms_norm")) == "x"
    assert after_gemm.gemm_output(ops.get("fused_add_rms_norm")) == "x"  # in place: x, then the residual r
    assert after_gemm.gemm_output(ops.Bench("reads_dy", inputs=("dy", "x"))) == "dy"
    with pytest.raises(ValueError, match="writes_only reads no"):
        after_gemm.gemm_output(ops.Bench("writes_only", outputs=("y",)))


# -- the schedule and the arithmetic ----------------------------------------------------------------

def test_replays_per_sample_last_about_the_target_within_bounds():
    assert after_gemm.replays_per_sample(100.0) == 10
    assert after_gemm.replays_per_sample(30.0, target_us=100.0) == 4
    assert after_gemm.replays_per_sample(1e6) == after_gemm.MIN_REPLAYS
    assert after_gemm.replays_per_sample(0.01) == after_gemm.MAX_REPLAYS
    assert after_gemm.replays_per_sample(0.0) == after_gemm.MAX_REPLAYS


def test_the_graph_sampled_first_flips_from_pair_to_pair():
    assert [after_gemm.with_norms_first(k) for k in range(4)] == [True, False, True, False]


def test_per_norm_is_the_difference_over_the_pairs():
    assert after_gemm.per_norm_us(100.0, 76.0) == pytest.approx(3.0)
    assert after_gemm.per_norm_us(100.0, 96.0, pairs=2) == pytest.approx(2.0)


class FakeDevice:
    """Samples of two graphs on a clock that drifts by ``drift`` µs per sample: the graph without the norms
    replays in pairs x gemm µs, the one with them in pairs x (gemm + norm[impl]); every sample is logged."""

    def __init__(self, norm_us: dict, gemm_us=5.0, pairs=8, drift=0.0):
        self.norm_us, self.gemm_us, self.pairs, self.drift = norm_us, gemm_us, pairs, drift
        self.log = []

    def _now(self):
        return self.drift * len(self.log)

    def with_norms(self, impl):
        def sample():
            us = self.pairs * (self.gemm_us + self.norm_us[impl]) + self._now()
            self.log.append(impl)
            return us
        return sample

    def gemms_only(self):
        us = self.pairs * self.gemm_us + self._now()
        self.log.append("gemms")
        return us


def records_of(*impls, pairs=8):
    return {i: AfterGemm("rms_norm", "bfloat16", 1, 4096, i, 16384, pairs=pairs, k=4096) for i in impls}


def test_time_rounds_interleaves_the_implementations_and_alternates_the_graphs():
    dev = FakeDevice({"pyrms": 2.0, "torch": 3.0})
    recs = records_of("pyrms", "torch")
    after_gemm.time_rounds(recs, {i: dev.with_norms(i) for i in recs}, dev.gemms_only, rounds=2, reps=3)
    one_round = ["pyrms", "gemms", "gemms", "pyrms", "pyrms", "gemms", "torch", "gemms", "gemms", "torch", "torch",
                 "gemms"]
    assert dev.log == one_round * 2
    for impl, norm in (("pyrms", 2.0), ("torch", 3.0)):
        r = recs[impl]
        assert [len(x) for x in r.rounds] == [3, 3] and [len(x) for x in r.gemm_rounds] == [3, 3]
        assert all(us == pytest.approx(norm) for x in r.rounds for us in x)
        assert all(us == pytest.approx(5.0) for x in r.gemm_rounds for us in x)
        assert r.median_us == pytest.approx(norm) and r.gemm_summary.median == pytest.approx(5.0)


def test_drift_between_the_two_samples_of_a_pair_cancels_in_the_median():
    dev = FakeDevice({"pyrms": 2.0}, drift=0.8)  # 0.8 µs of drift per sample: 0.1 µs per norm either way
    recs = records_of("pyrms")
    after_gemm.time_rounds(recs, {"pyrms": dev.with_norms("pyrms")}, dev.gemms_only, rounds=3, reps=4)
    samples = [us for r in recs["pyrms"].rounds for us in r]
    assert sorted(set(round(us, 6) for us in samples)) == [1.9, 2.1]  # each pair off by the drift, alternately
    assert recs["pyrms"].median_us == pytest.approx(2.0)
    assert recs["pyrms"].summary.spread == pytest.approx(0.0)


def test_an_implementation_that_fails_to_replay_is_failed_and_the_others_go_on():
    dev = FakeDevice({"pyrms": 2.0, "torch": 3.0})

    def broken():
        raise RuntimeError("replay\nfailed")

    recs = records_of("pyrms", "torch")
    recs["skipped"] = AfterGemm("rms_norm", "bfloat16", 1, 4096, "skipped", 16384, status=SKIPPED, pairs=8)
    after_gemm.time_rounds(recs, {"pyrms": dev.with_norms("pyrms"), "torch": broken, "skipped": broken},
                           dev.gemms_only, rounds=2, reps=2)
    assert recs["torch"].status == FAILED and recs["torch"].reason == "timing: RuntimeError: replay failed"
    assert recs["torch"].rounds == [] and "Traceback" in recs["torch"].notes[0]
    assert recs["skipped"].status == SKIPPED and recs["skipped"].rounds == []
    assert recs["pyrms"].status == OK and len(recs["pyrms"].rounds) == 2


class FakeTimer:
    """timing.EventTimer's warm_up and sample, on a graph whose replay lasts ``replay_us``."""

    def __init__(self, replay_us, host_us=10.0):
        self.replay_us, self.host_us, self.batches = replay_us, host_us, []

    def warm_up(self, run, sets, at_least):
        for i in range(max(sets, at_least)):
            run(i % sets)
        return self.host_us

    def sample(self, run, cursor):
        self.batches.append(cursor.batch)
        for _ in range(cursor.batch):
            run(0)
        return self.replay_us


def test_the_sampler_sizes_its_samples_from_a_probe():
    graph = types.SimpleNamespace(replays=0)
    graph.replay = lambda: setattr(graph, "replays", graph.replays + 1)
    timer = FakeTimer(replay_us=40.0)
    sample, cursor = after_gemm.sampler(timer, graph)
    assert timer.batches == [after_gemm.PROBE_REPLAYS] and cursor.batch == 25  # 1000 µs / 40 µs
    assert cursor.spin_us >= 2 * timer.host_us * 25
    assert sample() == 40.0 and timer.batches[-1] == 25
    assert graph.replays == after_gemm.PROBE_REPLAYS + after_gemm.PROBE_REPLAYS + 25  # warm-up, probe, sample


def test_capture_runs_once_outside_the_graph_then_captures_thread_locally_on_the_stream():
    events = []

    @contextlib.contextmanager
    def graph(g, stream=None, capture_error_mode=None):
        events.append(("capture", g, stream, capture_error_mode))
        yield
        events.append("end")

    cuda = types.SimpleNamespace(synchronize=lambda: events.append("sync"), CUDAGraph=lambda: "G", graph=graph)
    got = after_gemm.capture(types.SimpleNamespace(cuda=cuda), "side", lambda: events.append("fn"))
    assert got == "G"
    assert events == ["fn", "sync", ("capture", "G", "side", "thread_local"), "fn", "end"]


def test_the_gemms_write_the_ops_first_input_of_each_set_with_the_norm_after_each():
    calls = []

    class Scaled:  # what torch.randn(...) gives: its shape, and the scale it is multiplied by
        def __init__(self, shape):
            self.shape = shape

        def __mul__(self, scale):
            return ("scaled", self.shape, scale)

    class FakeTorch:
        @staticmethod
        def randn(*shape, device=None, dtype=None):
            assert (device, dtype) == ("cuda:0", "bf16")  # the output's
            return Scaled(shape)

        @staticmethod
        def matmul(a, b, out=None):
            calls.append(("gemm", a.shape, b, out))

    outs = [types.SimpleNamespace(device="cuda:0", dtype="bf16", name=f"x{j}") for j in range(3)]
    problem = types.SimpleNamespace(op=ops.get("fused_add_rms_norm"), tokens=2, hidden=64,
                                    torch_rows=lambda torch, name: outs if name == "x" else None)
    gemms = after_gemm.Gemms(FakeTorch, problem, k=16)
    gemms.run(lambda j: calls.append(("norm", j)))
    assert [c[0] for c in calls] == ["gemm", "norm"] * 3
    assert calls[0] == ("gemm", (2, 16), ("scaled", (16, 64), 16 ** -0.5), outs[0])
    assert [c[3].name for c in calls if c[0] == "gemm"] == ["x0", "x1", "x2"] and calls[-1] == ("norm", 2)


# -- the report and the JSON ------------------------------------------------------------------------

def rec(impl, norm_rounds, gemm=5.0, tokens=1, hidden=4096, status=OK, reason=""):
    r = AfterGemm("rms_norm", "bfloat16", tokens, hidden, impl, 16384, status=status, reason=reason, sets=8,
                  batch=12, pairs=8, k=hidden)
    if status == OK:
        r.rounds = [list(x) for x in norm_rounds]
        r.gemm_rounds = [[gemm] * len(x) for x in norm_rounds]
    return r


def test_after_gemm_table_states_each_median_with_its_spread_and_the_ratios():
    records = [rec("pyrms", [[2.0, 2.0], [2.2, 2.2]]), rec("pyrms_nopdl", [[3.0, 3.0], [3.0, 3.0]]),
               rec("torch", [[4.5, 4.5], [4.5, 4.5]]), rec("compile", [[3.3, 3.3]]),
               rec("flashinfer_pdl", [[1.8, 1.8]]),
               rec("liger", [], status=SKIPPED, reason="Liger-Kernel is not importable: no module")]
    text = report.after_gemm_table(records, "rms_norm", "bfloat16", config.IMPLS)
    lines = text.splitlines()
    assert lines[0] == "rms_norm bfloat16 after a GEMM, in a CUDA graph: device us per norm (median +- run-to-run spread)"
    assert "(replay of 8 x (GEMM -> norm) - replay of the 8 GEMMs alone) / 8" in text
    head = next(line for line in lines if line.lstrip().startswith("tokens"))
    assert "GEMM us" in head and "xbest" in head and "xpdl" in head and "xseed" not in head
    row = next(line for line in lines if line.lstrip().startswith("1 "))
    assert row.split()[:4] == ["1", "4096", "4096", "5.00"]
    assert "2.10 +-10%" in row and "3.00 +-0%" in row and "4.50 +-0%" in row and "3.30 +-0%" in row
    assert row.split()[-2:] == [f"{3.3 / 3.0:.2f}", f"{1.8 / 2.1:.2f}"]  # like for like: without PDL, with PDL
    assert "  Liger skipped at 1x4096: Liger-Kernel is not importable: no module" in lines


def test_after_gemm_section_says_why_it_is_missing():
    assert report.after_gemm_section(None) == ""
    assert report.after_gemm_section({"reason": "it needs PyTorch"}) == (
        "After a GEMM, in a CUDA graph: not measured (it needs PyTorch)")
    assert "no shape of the run has few enough tokens (--after-gemm-tokens)" in report.after_gemm_section([])
    fused = rec("pyrms", [[2.0]])
    fused.op = "fused_add_rms_norm"
    text = report.after_gemm_section([rec("pyrms", [[2.0]]), fused])
    assert text.index("rms_norm bfloat16 after a GEMM") < text.index("fused_add_rms_norm bfloat16 after a GEMM")


def test_after_gemm_json_holds_the_samples_and_the_gemms():
    r = rec("pyrms", [[2.0, 2.4], [2.2, 2.2]], gemm=6.0)
    d = r.to_dict()
    assert d["method"] == "after a GEMM, in a CUDA graph" and d["pairs"] == 8 and d["gemm_k"] == 4096
    assert d["replays_per_sample"] == 12 and d["samples_us_per_round"] == [[2.0, 2.4], [2.2, 2.2]]
    assert d["median_us"] == pytest.approx(2.2) and d["round_medians_us"] == pytest.approx([2.2, 2.2])
    assert d["gemm_median_us"] == pytest.approx(6.0) and d["gemm_us_per_round"] == [[6.0, 6.0], [6.0, 6.0]]
    skipped = rec("liger", [], status=SKIPPED, reason="no").to_dict()
    assert "median_us" not in skipped and "gemm_median_us" not in skipped
    cfg = parse("--shapes", "1x4096")
    info = {"device": {}, "versions": {}, "command": "x"}
    data = report.to_json(info, cfg, None, None, [], None, None, [], 1.0, False, None, [r])
    assert json.loads(json.dumps(data, default=str))["after_gemm"][0]["gemm_median_us"] == pytest.approx(6.0)
    assert report.to_json(info, cfg, None, None, [], None, None, [], 1.0, False, None, {"reason": "r"})[
        "after_gemm"] == {"reason": "r"}


def test_progress_line_names_the_gemm_and_each_implementation():
    line = after_gemm.progress_line([rec("pyrms", [[2.0]]), rec("liger", [], status=SKIPPED)], 1.25)
    assert line == "[after a GEMM rms_norm bfloat16 1x4096] GEMM 5.00us; pyrms 2.00us, liger SKIPPED  (1.2 s)"


# -- the command line -------------------------------------------------------------------------------

def test_after_gemm_flags():
    assert not parse("--no-after-gemm").after_gemm
    cfg = parse("--after-gemm-tokens", "32", "--gemm-k", "2048")
    assert cfg.after_gemm and cfg.after_gemm_tokens == 32 and cfg.gemm_k == 2048


@pytest.mark.parametrize("argv", [["--after-gemm-tokens", "0"], ["--gemm-k", "-1"], ["--gemm-k", "x"]])
def test_bad_after_gemm_flags_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2 and "is not a positive integer" in capsys.readouterr().err


def test_help_explains_the_section(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for needle in ("--no-after-gemm", "--after-gemm-tokens", "--gemm-k", "after a GEMM, in a",
                   f"{config.AFTER_GEMM_PAIRS} pairs GEMM -> norm"):
        assert needle in out


def test_the_run_loads_pytorch_for_the_section_whatever_the_implementations(monkeypatch):
    from pyrms.bench import run

    loaded = []
    monkeypatch.setattr(run, "load_torch", lambda: loaded.append(True) or (None, "no torch here"))
    device = types.SimpleNamespace(ordinal=0)
    ctx = run._context(parse("--shapes", "1x4096", "--impls", "pyrms"), device)
    assert loaded and ctx.torch is None and ctx.torch_reason == "no torch here"
    loaded.clear()
    run._context(parse("--shapes", "1x4096", "--impls", "pyrms", "--no-after-gemm"), device)
    run._context(parse("--shapes", "4096x4096", "--ops", "rms_norm", "--impls", "pyrms"), device)
    assert not loaded


def test_without_pytorch_the_section_says_so():
    ctx = types.SimpleNamespace(torch=None, torch_reason="PyTorch is not importable: x")
    got = after_gemm.measure(parse("--shapes", "1x4096"), ctx, None, None, None, print)
    assert got == {"reason": "it needs PyTorch (the GEMM, the graph capture): PyTorch is not importable: x"}
    # nothing to time: no reason to give (the report says no shape has few enough tokens)
    assert after_gemm.measure(parse("--shapes", "4096x4096", "--ops", "rms_norm"), ctx, None, None, None, print) == []


def test_an_op_without_the_implementations_asked_for_is_not_set_up():
    ctx = types.SimpleNamespace(torch="unused")  # nothing is built, so nothing of it is touched
    cfg = parse("--shapes", "1x4096", "--ops", "fused_add", "--impls", "triton")
    assert after_gemm.measure_problem(cfg, ctx, None, None, None, None, "fused_add_rms_norm", "bfloat16",
                                      config.Shape(1, 4096)) == []
