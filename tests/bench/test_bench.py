"""pyrms.bench without a GPU: the pure parts (byte counts, statistics, rotation, targets, reports,
the command line), the missing-GPU message, and whole runs on a simulated GPU.

The simulator stands in for cuda.bindings.driver (each pyrms.driver module reaches the driver only
through its ``_cu`` global): device memory is host memory, the pyrms and seed kernels run in numpy, and a
simulated device clock advances by each kernel's bytes over a fixed bandwidth, so events, the spin
kernel, rotation, validation, timing, graphs, the report, JSON and targets all run for real.
"""
import collections
import ctypes
import dataclasses
import datetime
import importlib
import importlib.util
import json
import re
import struct
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from cuda.bindings import driver as real_cu

from tests.support.fake_driver import PDL, fresh_driver_state
from pyrms import compiler, contract, dtypes, driver
from pyrms.bench import cli, config, floor, host, ops, report, stats, targets, timing, validate
from pyrms.bench.results import FAILED, OK, SKIPPED, Record
from pyrms.ops.fused_add_rms_norm import bench as fused_add_bench
from pyrms.ops.rms_norm_backward import bench as backward_bench
from pyrms.ops.rms_norm.twin import rms_norm_ref

REPO = Path(__file__).resolve().parents[2]


# -- byte counts ---------------------------------------------------------------------------------

def test_bytes_moved_per_op():
    t, h = 16384, 5120
    assert ops.get("rms_norm").bytes_moved(t, h, 2) == (2 * t * h + h) * 2
    # qk_norm_rope: the q and k heads (9 of a row's 10 heads at 8 q heads per kv head) read and written, 2 weights
    assert ops.get("qk_norm_rope").bytes_moved(t, 10240, 2) == (2 * t * 9 * 1024 + 2 * 128) * 2
    assert ops.get("fused_add_rms_norm").bytes_moved(t, h, 2) == (4 * t * h + h) * 2
    assert ops.get("rms_norm_backward").bytes_moved(t, h, 4) == (3 * t * h + 2 * h) * 4
    assert ops.get("rms_norm").arrays == ("x", "y") and ops.get("fused_add_rms_norm").arrays == ("x", "r")
    assert ops.get("rms_norm_backward").arrays == ("dy", "x", "dx") and ops.get("rms_norm_backward").vector_outputs == ("dw",)
    with pytest.raises(ValueError, match="unknown op 'nope'; allowed: rms_norm"):
        ops.get("nope")


def test_the_benchmarked_ops_come_from_the_registry():
    """Each op's declaration is in its family's bench module, named by its spec; the bench lists no op."""
    from pyrms.ops import registry

    benches = ops.benches()
    assert set(benches) == {name for name, spec in registry.REGISTRY.items() if spec.bench is not None}
    assert all(registry.get(name).bench.startswith("pyrms.ops.") and b.name == name for name, b in benches.items())
    assert ops.headline() == "rms_norm"
    assert ops.swept() == ("rms_norm", "fused_add_rms_norm", "rms_norm_backward", "qk_norm_rope", "gated_rms_norm",
                           "gated_rms_norm_backward")
    assert ops.extras() == ("fused_add_rms_norm", "rms_norm_backward", "qk_norm_rope", "gated_rms_norm",
                            "gated_rms_norm_backward")
    assert ops.aliases() == {"forward": "rms_norm", "fused_add": "fused_add_rms_norm", "backward": "rms_norm_backward",
                             "qk_norm": "qk_norm_rope", "gated": "gated_rms_norm",
                             "gated_backward": "gated_rms_norm_backward"}
    assert benches["layer_norm"].host is not None and not benches["layer_norm"].impls  # the host section only
    with pytest.raises(ValueError, match="unknown op 'layer_norm'"):
        ops.get("layer_norm")
    # pure: the declarations import neither PyTorch nor Triton
    code = ("import sys; from pyrms.bench import ops, cli; ops.benches(); cli.build_parser(); "
            "assert not {'torch', 'triton'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


# -- statistics, rotation, sampling ---------------------------------------------------------------

def test_summary_median_percentiles_and_spread():
    s = stats.summarize([[10.0, 11.0, 12.0], [12.0, 13.0, 14.0]])
    assert s.median == 12.0 and s.samples == 6
    assert s.round_medians == (11.0, 13.0)
    assert s.spread == pytest.approx(2 / 12)
    assert s.p10 == pytest.approx(np.percentile([10, 11, 12, 12, 13, 14], 10))
    assert s.noise == pytest.approx((s.p90 - s.p10) / 12)
    assert stats.summarize([[5.0, 5.0]]).spread == 0.0  # one round: no run-to-run spread to show
    assert stats.summarize([]) is None and stats.summarize([[]]) is None


def test_gbps():
    assert stats.gbps(4_000_000, 1.0) == pytest.approx(4000.0)  # 4 MB in 1 us is 4 TB/s
    assert stats.gbps(1, 0.0) == 0.0


@pytest.mark.parametrize("set_bytes, l2, cap, expected", [
    (16 * 1024, 60 << 20, 8 << 30, 7680),       # tiny sets: enough to cover 2 x L2
    (2 << 30, 60 << 20, 8 << 30, 2),            # huge sets: never fewer than two
    (2 << 30, 60 << 20, 3 << 30, 1),            # ...unless only one fits under the cap
    (10 << 20, 60 << 20, 8 << 30, 12),
    (10 << 20, 60 << 20, 50 << 20, 5),          # the cap wins over the L2 wish
])
def test_rotation_sets(set_bytes, l2, cap, expected):
    sets = stats.rotation_sets(set_bytes, l2, cap)
    assert sets == expected
    if (sets + 1) * set_bytes <= cap and sets > 2:  # not capped: the sets cover twice the L2
        assert sets * set_bytes >= 2 * l2


def test_rotation_sets_rejects_empty_sets():
    with pytest.raises(ValueError):
        stats.rotation_sets(0, 1, 1)


def test_batch_size_bounds():
    assert stats.batch_size(10_000) == 100           # small: latency-bound, a full batch
    assert stats.batch_size(2 << 30) == 3            # 2 GiB per call: the minimum
    assert 3 <= stats.batch_size(84 << 20) <= 100
    assert stats.pad(1) == 256 and stats.pad(256) == 256 and stats.pad(257) == 512


def test_sample_rows_and_runs():
    assert stats.sample_rows(5, 5120) == [0, 1, 2, 3, 4]
    rows = stats.sample_rows(32768, 8192)
    assert rows == sorted(set(rows)) and rows[0] == 0 and rows[-1] == 32767
    assert rows[:32] == list(range(32)) and rows[-32:] == list(range(32768 - 32, 32768))
    assert 200 < len(rows) <= 256
    assert stats.contiguous_runs([0, 1, 2, 5, 7, 8]) == [(0, 3), (5, 1), (7, 2)]
    assert stats.contiguous_runs([]) == []


# -- validation math -------------------------------------------------------------------------------

def test_rel_error_and_nan():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert validate.rel_error(ref, ref) == 0.0
    assert validate.rel_error(ref * 1.01, ref) == pytest.approx(0.01)
    assert validate.rel_error(np.array([[1.0, np.nan], [3.0, 4.0]]), ref) == float("inf")
    assert not validate.passed({"y": float("inf")}, "bfloat16")
    assert validate.passed({"y": 5e-3}, "bfloat16") and not validate.passed({"y": 5e-3}, "float16")


def test_backward_reference_is_the_gradient():
    """dx and dγ of the reference against central differences of L = sum(dy * rms_norm(x) * w)."""
    rng = np.random.default_rng(1)
    x, w, dy = rng.normal(size=(3, 7)), rng.normal(size=7), rng.normal(size=(3, 7))
    eps, step = 1e-6, 1e-6

    def loss(x_, w_):
        return float(np.sum(dy * rms_norm_ref(x_, w_, eps)))

    num_dx = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[idx] = step
        num_dx[idx] = (loss(x + e, w) - loss(x - e, w)) / (2 * step)
    num_dw = np.array([(loss(x, w + step * np.eye(7)[j]) - loss(x, w - step * np.eye(7)[j])) / (2 * step)
                       for j in range(7)])
    assert np.allclose(backward_bench.backward_dx_ref(dy, x, w, eps), num_dx, atol=1e-6)
    assert np.allclose(backward_bench.backward_dw_partial(dy, x, eps), num_dw, atol=1e-6)


def test_fused_add_reference_rounds_the_sum_to_storage():
    bf16 = dtypes.BFLOAT16.numpy
    x = np.array([[1.0, 2.0 ** -9]], dtype=bf16)
    r = np.array([[1.0, 1.0]], dtype=bf16)
    y, s = fused_add_bench.fused_add_ref(x, r, np.ones(2), 0.0, bf16)
    assert s.tolist() == [[2.0, 1.0]]  # 1 + 2^-9 rounds to 1 in bf16
    assert np.allclose(y, rms_norm_ref(s, np.ones(2), 0.0))


# -- targets ---------------------------------------------------------------------------------------

def rec(impl, t, h, us, op="rms_norm", dtype="bfloat16", rounds=None, status=OK, reason=""):
    r = Record(op, dtype, t, h, impl, ops.get(op).bytes_moved(t, h, 2), status=status, reason=reason)
    if status == OK:
        r.rounds = rounds if rounds is not None else [[us, us], [us, us]]
    return r


def by_text(found, fragment):
    [t] = [t for t in found if fragment in t.text]
    return t


def test_ceiling_targets():
    ceiling = 4000.0
    t, h = 16384, 5120
    nbytes = ops.get("rms_norm").bytes_moved(t, h, 2)
    fast = nbytes / (0.96 * ceiling) / 1e3  # us at 0.96 x ceiling
    slow = nbytes / (0.90 * ceiling) / 1e3
    found = targets.evaluate([rec("pyrms", t, h, fast)], ceiling)
    assert by_text(found, "bf16 rms_norm 16384x5120: pyrms >= 0.95").status == targets.PASS
    assert by_text(found, "4096x5120: pyrms >= 0.85").status == targets.NA
    found = targets.evaluate([rec("pyrms", t, h, slow)], ceiling)
    target = by_text(found, "bf16 rms_norm 16384x5120: pyrms >= 0.95")
    assert target.status == targets.FAIL and "0.900 x 4000 GB/s" in target.detail
    failed = rec("pyrms", t, h, 0, op="fused_add_rms_norm", status=FAILED, reason="validation: bad")
    assert by_text(targets.evaluate([failed], ceiling), "fused_add_rms_norm 16384x5120").status == targets.FAIL
    skipped = rec("pyrms", t, h, 0, op="rms_norm_backward", status=SKIPPED, reason="pyrms has no rms_norm_backward")
    target = by_text(targets.evaluate([skipped], ceiling), "bf16 rms_norm_backward 16384x5120")
    assert target.status == targets.NA and "has no" in target.detail


def test_backward_at_32_tokens_against_torch_eager():
    def judged(mine_us, eager_us, impl="pyrms_nopdl"):
        records = [rec(impl, 32, 5120, mine_us, op="rms_norm_backward")]
        if eager_us is not None:
            records.append(rec("torch", 32, 5120, eager_us, op="rms_norm_backward"))
        return by_text(targets.evaluate(records, 4000.0),
                       "rms_norm_backward 32x5120: pyrms (no pdl) no slower than torch eager")

    assert judged(8.0, 11.0).status == targets.PASS
    assert "pyrms (no pdl) 8.00 us / torch eager 11.00 us = 0.727" in judged(8.0, 11.0).detail
    assert judged(12.0, 11.0).status == targets.FAIL
    assert judged(8.0, None).status == targets.NA
    # like for like: torch eager launches without PDL, so pyrms's PDL figure is not the one judged
    assert judged(8.0, 11.0, impl="pyrms").status == targets.NA


def test_vs_others_uses_the_spread_and_the_speedup_rule():
    ceiling, t, h = 4000.0, 4096, 5120
    nbytes = ops.get("rms_norm").bytes_moved(t, h, 2)
    at = lambda frac: nbytes / (frac * ceiling) / 1e3  # noqa: E731
    without_pdl = "4096x5120: pyrms (no pdl) no slower than the fastest of torch eager, torch.compile, Triton, Liger and"
    # pyrms 1% slower than a fast Triton, but the rounds spread by 2%: within noise, PASS
    mine = rec("pyrms_nopdl", t, h, 0, rounds=[[at(0.90) * 1.01]] * 2 + [[at(0.90) * 1.01 * 1.02]])
    found = targets.evaluate([mine, rec("triton", t, h, at(0.90)), rec("torch", t, h, at(0.5))], ceiling)
    assert by_text(found, without_pdl).status == targets.PASS
    # same without spread: FAIL, though pyrms with PDL is faster than Triton: that one is not compared with it
    mine = rec("pyrms_nopdl", t, h, at(0.90) * 1.01)
    found = targets.evaluate([mine, rec("pyrms", t, h, at(0.95)), rec("triton", t, h, at(0.90))], ceiling)
    target = by_text(found, without_pdl)
    assert target.status == targets.FAIL and target.detail.startswith("pyrms (no pdl) ")
    assert not [x for x in found if "4096x5120: pyrms no slower" in x.text]  # no peer with PDL timed
    # the best other reaches only 0.6 x ceiling: pyrms must be 1.10x faster
    found = targets.evaluate([rec("pyrms_nopdl", t, h, at(0.6) / 1.05), rec("compile", t, h, at(0.6))], ceiling)
    target = by_text(found, without_pdl)
    assert target.status == targets.FAIL and ">= 1.10x" in target.text
    found = targets.evaluate([rec("pyrms_nopdl", t, h, at(0.6) / 1.2), rec("compile", t, h, at(0.6))], ceiling)
    assert by_text(found, without_pdl).status == targets.PASS
    # a peer with PDL: pyrms with PDL against it alone, beside the comparison without PDL
    found = targets.evaluate([rec("pyrms_nopdl", t, h, at(0.9)), rec("pyrms", t, h, at(0.9)),
                              rec("flashinfer", t, h, at(0.5)), rec("flashinfer_pdl", t, h, at(0.95))], ceiling)
    with_pdl = by_text(found, "4096x5120: pyrms no slower than the fastest of FlashInfer (pdl)")
    assert with_pdl.status == targets.FAIL and "vs FlashInfer (pdl)" in with_pdl.detail
    assert by_text(found, without_pdl).status == targets.PASS  # against FlashInfer without PDL
    # no other implementation timed: N/A; and shapes under 1024 tokens are not judged
    found = targets.evaluate([rec("pyrms_nopdl", t, h, 10.0), rec("pyrms_nopdl", 128, h, 5.0)], ceiling)
    assert by_text(found, without_pdl).status == targets.NA
    assert not [x for x in found if "128x5120: pyrms" in x.text and x.group == "vs others"]


def test_latency_target_arithmetic():
    vs_seed = "32x5120: pyrms (no pdl) device time per launch <= 0.7 x seed's"
    found = targets.evaluate([rec("pyrms_nopdl", 32, 5120, 2.0), rec("seed", 32, 5120, 3.0)], None)
    assert by_text(found, vs_seed).status == targets.PASS and "0.667" in by_text(found, vs_seed).detail
    found = targets.evaluate([rec("pyrms_nopdl", 32, 5120, 2.2), rec("seed", 32, 5120, 3.0)], None)
    assert by_text(found, vs_seed).status == targets.FAIL
    # the seed launches without PDL: pyrms's PDL figure is not set against it
    found = targets.evaluate([rec("pyrms", 32, 5120, 1.0), rec("pyrms_nopdl", 32, 5120, 2.2),
                              rec("seed", 32, 5120, 3.0)], None)
    assert by_text(found, vs_seed).status == targets.FAIL
    found = targets.evaluate([rec("pyrms", 32, 5120, 1.0), rec("seed", 32, 5120, 3.0)], None)
    assert by_text(found, vs_seed).status == targets.NA
    found = targets.evaluate([rec("pyrms_nopdl", 1, 16384, 2.0),
                              rec("seed", 1, 16384, 0, status=SKIPPED, reason="seed kernel cannot launch")], None)
    target = by_text(found, "1x16384")
    assert target.status == targets.NA and "cannot launch" in target.detail


def test_host_targets():
    us = {"bare": 2.0, "pyrms": 2.2, "bare layer_norm": 2.0, "layer_norm": 2.6, "rms_norm torch tensors": 3.9,
          "pyrms.torch.rms_norm": 9.0, "torch": 10.0}
    found = targets.evaluate([], None, {"per_call_us": us})
    assert by_text(found, "pyrms.rms_norm (raw ints) <= 1.15").status == targets.PASS      # 1.10
    assert by_text(found, "layer_norm (raw ints) <= 1.25").status == targets.FAIL          # 1.30, its own bare
    assert by_text(found, "rms_norm torch tensors <= 2.0").status == targets.PASS          # 1.95, rms_norm's bare
    assert by_text(found, "fused_add_rms_norm (raw ints)").status == targets.NA            # not measured
    assert by_text(found, "torch eager F.rms_norm").status == targets.PASS
    found = targets.evaluate([], None, {"per_call_us": {"bare": 2.0, "pyrms": 2.4}, "torch_reason": "no torch"})
    assert by_text(found, "pyrms.rms_norm (raw ints)").status == targets.FAIL
    eager = by_text(found, "torch eager F.rms_norm")
    assert eager.status == targets.NA and eager.detail == "no torch"
    assert all(t.status == targets.NA for t in targets.evaluate([], None, None))
    assert targets.tally([t for t in found if t.group == "host"]) == {"PASS": 0, "FAIL": 1, "N/A": 6}


# -- reports ---------------------------------------------------------------------------------------

def sample_records():
    return [rec("pyrms", 1, 5120, 2.0), rec("pyrms_nopdl", 1, 5120, 3.0), rec("seed", 1, 5120, 3.5),
            rec("torch", 1, 5120, 6.0),
            rec("triton", 1, 5120, 0, status=FAILED, reason="validation: relative error of y 0.5 >= 0.01"),
            rec("pyrms", 16384, 5120, 42.0), rec("pyrms_nopdl", 16384, 5120, 43.0), rec("torch", 16384, 5120, 60.0),
            rec("triton", 16384, 5120, 45.0), rec("seed", 16384, 5120, 50.0), rec("compile", 16384, 5120, 44.0),
            rec("compile", 1, 5120, 0, status=SKIPPED, reason="torch.compile not run at this shape in --quick")]


def test_table_cells_and_reasons():
    text = report.table(sample_records(), "rms_norm", "bfloat16", 4000.0, config.IMPLS)
    lines = text.splitlines()
    assert lines[0].startswith("rms_norm bfloat16: GB/s per implementation (copy ceiling 4000 GB/s)")
    assert "pyrms us" in lines[1] and lines[1].split()[-2:] == ["xbest", "xseed"]  # no peer with PDL: no xpdl
    row = next(line for line in lines if line.split()[:2] == ["16384", "5120"])
    nbytes = ops.get("rms_norm").bytes_moved(16384, 5120, 2)
    assert f"{nbytes / 1e6:.2f}" in row and "42.00" in row
    # like for like: the peers and the seed launch without PDL, so both ratios are of pyrms (no pdl)
    assert row.split()[-2:] == [f"{44.0 / 43.0:.2f}", f"{50.0 / 43.0:.2f}"]
    small = next(line for line in lines if line.split()[:2] == ["1", "5120"])
    assert "FAIL" in small and small.split()[-2:] == [f"{6.0 / 3.0:.2f}", f"{3.5 / 3.0:.2f}"]
    assert any("Triton failed at 1x5120: validation" in line for line in lines)
    assert any("torch.compile skipped at 1x5120" in line for line in lines)
    assert not any("note: no" in line for line in lines)


def test_table_sets_pyrms_with_pdl_against_peers_with_pdl_only():
    records = [rec("pyrms", 1, 5120, 2.0), rec("torch", 1, 5120, 6.0), rec("flashinfer", 1, 5120, 3.2),
               rec("flashinfer_pdl", 1, 5120, 2.4), rec("seed", 1, 5120, 3.5)]
    lines = report.table(records, "rms_norm", "bfloat16", 4000.0, config.IMPLS).splitlines()
    assert lines[1].split()[-3:] == ["xbest", "xpdl", "xseed"]
    row = next(line for line in lines if line.split()[:2] == ["1", "5120"])
    # no pyrms (no pdl) timed: nothing is set against the peers without PDL, and a note says why
    assert row.split()[-3:] == ["-", f"{2.4 / 2.0:.2f}", "-"]
    assert "  note: no xbest or xseed: the ratio is of pyrms (no pdl), which this run did not time" in lines
    records.append(rec("pyrms_nopdl", 1, 5120, 3.0))
    lines = report.table(records, "rms_norm", "bfloat16", 4000.0, config.IMPLS).splitlines()
    row = next(line for line in lines if line.split()[:2] == ["1", "5120"])
    assert row.split()[-3:] == [f"{3.2 / 3.0:.2f}", f"{2.4 / 2.0:.2f}", f"{3.5 / 3.0:.2f}"]


def test_latency_table_lists_every_implementation():
    text = report.latency_table(sample_records(), "rms_norm", "bfloat16", config.IMPLS)
    head = text.splitlines()[1]
    for label in ("pyrms", "seed", "torch eager", "torch.compile", "Triton"):
        assert label in head
    assert "2.00 +-0%" in text and "FAIL" in text


def fake_info():
    return {"device": {"name": "Sim H200", "compute_capability": [9, 0], "multiprocessors": 132,
                       "l2_bytes": 60 << 20, "memory_bytes": 141 << 30},
            "versions": {"cuda_driver": "13.0", "nvrtc": "13.3", "torch": None},
            "command": "python -m pyrms.bench --quick", "created": "now", "argv": ["--quick"]}


def test_header_explains_columns_and_json_round_trips(tmp_path):
    from pyrms.bench.ceiling import Ceiling

    ceiling = Ceiling(1 << 30, [500.0, 505.0, 510.0], "start")
    text = report.header(fake_info(), ceiling, ("rms_norm", "rms_norm_backward"))
    assert f"copy ceiling: {ceiling.gbps:.0f} GB/s" in text
    for needle in ("read x + read γ + write y", "3·T·H + 2·H", "floor us", "+-%", "xbest", "xseed", "float64 reference",
                   "time / pyrms (no pdl) time", "xpdl      (fastest of FlashInfer (pdl), launched with PDL) time / pyrms "
                   "(with PDL) time", "seed kernel time (it launches without PDL) / pyrms (no pdl) time"):
        assert needle in text
    cfg = config.Config(shapes=(config.Shape(1, 5120), config.Shape(16384, 5120)))
    records = sample_records()
    found = targets.evaluate(records, ceiling.gbps, None)
    data = report.to_json(fake_info(), cfg, ceiling, ceiling, records, None, None, found, 12.5, False, sample_floors())
    path = tmp_path / "sub" / "r.json"
    report.write_json(path, data)
    back = json.loads(path.read_text())
    assert back["command"] == "python -m pyrms.bench --quick" and back["device"]["name"] == "Sim H200"
    assert back["config"]["shapes"] == ["1x5120", "16384x5120"]
    assert back["copy_ceiling"]["gbps"] == pytest.approx(ceiling.gbps)
    mine = next(r for r in back["results"] if r["impl"] == "pyrms" and r["tokens"] == 16384)
    assert mine["median_us"] == 42.0 and mine["ceiling_fraction"] == pytest.approx(mine["gbps"] / ceiling.gbps)
    assert mine["samples_us_per_round"] == [[42.0, 42.0], [42.0, 42.0]]
    assert {t["status"] for t in back["targets"]} <= {"PASS", "FAIL", "N/A"}
    floors = {(f["kernel"], f["hidden"], f["method"], f["pdl"]): f for f in back["launch_floor"]}
    assert len(floors) == 16 and floors[("copy", 4096, "graph", True)]["median_us"] == pytest.approx(1.2)
    assert floors[("copy", 8192, "back to back", False)]["status"] == "failed"
    assert report.to_json(fake_info(), cfg, ceiling, ceiling, records, None, None, found, 1, False)["launch_floor"] is None
    full = report.full_text(fake_info(), ceiling, ceiling, records, None, None, found, cfg, 12.5, [path],
                            sample_floors())
    assert "Launch floor:" in full and "decode shapes against the launch floor" in full
    assert "Targets:" in full and full.rstrip().endswith("finished in 12.5 s")


def sweep_records():
    """A sweep's results as the plot meets them: the forward with every implementation, the fused add and the
    backward with fewer (no pyrms_nopdl, no seed), so matplotlib's own colour cycle would differ per panel."""
    records = [rec(impl, t, 5120, us * t ** 0.5) for t in (1, 128, 16384)
               for impl, us in (("pyrms", 2.0), ("pyrms_nopdl", 2.5), ("seed", 3.0), ("torch", 6.0), ("compile", 4.0))]
    records += [rec(impl, t, 5120, us * t ** 0.5, op=op) for op in ("fused_add_rms_norm", "rms_norm_backward")
                for t in (1, 16384) for impl, us in (("pyrms", 3.0), ("torch", 7.0), ("compile", 5.0))]
    records.append(rec("liger", 1, 5120, 0, op="rms_norm_backward", status=SKIPPED, reason="not installed"))
    return records


def test_plot_lines_per_panel_and_implementation():
    lines = report.plot_lines(sweep_records())
    assert list(lines) == [("rms_norm", "bfloat16", 5120), ("fused_add_rms_norm", "bfloat16", 5120),
                           ("rms_norm_backward", "bfloat16", 5120)]
    assert list(lines[("rms_norm", "bfloat16", 5120)]) == ["pyrms", "pyrms_nopdl", "seed", "torch", "compile"]
    assert list(lines[("rms_norm_backward", "bfloat16", 5120)]) == ["pyrms", "torch", "compile"]  # skipped: none
    points = lines[("fused_add_rms_norm", "bfloat16", 5120)]["torch"]
    assert [t for t, _ in points] == [1, 16384] and points[1][1] == pytest.approx(
        ops.get("fused_add_rms_norm").bytes_moved(16384, 5120, 2) / (7.0 * 128) / 1e3)


def test_every_implementation_has_a_style_of_its_own():
    assert set(config.IMPL_STYLES) == set(config.IMPLS)
    colours, markers = zip(*config.IMPL_STYLES.values())
    assert len(set(colours)) == len(set(markers)) == len(config.IMPLS)


def test_plot_draws_each_implementation_in_its_colour_in_every_panel(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from matplotlib.figure import Figure

    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *args, **kwargs: figures.append(self))
    assert report.write_plot(tmp_path / "p.png", sweep_records(), 4000.0, "Sim H200: python -m pyrms.bench") is None
    [figure] = figures
    colour = {label: config.IMPL_STYLES[impl][0] for impl, label in config.IMPL_LABELS.items()}
    drawn = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            if line.get_label() in colour:  # the copy ceiling's line is black, and unlabelled
                drawn.setdefault(line.get_label(), set()).add(line.get_color())
    assert drawn == {label: {colour[label]} for label in ("pyrms", "pyrms (no pdl)", "seed", "torch eager",
                                                          "torch.compile")}
    [legend] = figure.legends
    assert {text.get_text(): handle.get_color() for text, handle in zip(legend.get_texts(), legend.legend_handles)
            if text.get_text() in colour} == {label: c.pop() for label, c in drawn.items()}
    caption = figure.get_suptitle()
    assert caption.startswith("GB/s (bytes one call moves / median device time per launch) against tokens")
    assert caption.endswith("Sim H200: python -m pyrms.bench")


def test_replot_draws_a_finished_run_again_from_its_json(tmp_path, monkeypatch):
    from pyrms.bench.ceiling import Ceiling

    records = sweep_records() + [rec("triton", 1, 5120, 0, status=FAILED, reason="validation: y")]
    records[0].error = {"y": float("nan")}  # written as "nan"
    ceiling = Ceiling(1 << 30, [500.0], "start")
    data = report.to_json(fake_info(), config.Config(shapes=()), ceiling, None, records, None, None, [], 1.0, False)
    report.write_json(tmp_path / "run.json", data)
    drawn = []
    monkeypatch.setattr(report, "write_plot", lambda *args: drawn.append(args))
    report.replot(tmp_path / "run.json")
    [(path, back, ceiling_gbps, title)] = drawn
    assert path == tmp_path / "run.png" and title == "Sim H200: python -m pyrms.bench --quick"
    assert ceiling_gbps == pytest.approx(ceiling.gbps)
    assert [r.to_dict() for r in back] == [r.to_dict() for r in records] and str(back[0].error) == "{'y': nan}"


# -- launch floor ----------------------------------------------------------------------------------

def floor_rec(kernel, hidden, method, pdl, us, status=OK, reason=""):
    f = floor.Floor(kernel, hidden, method, pdl, threads=floor.copy_threads(hidden) if hidden else 32, launches=100,
                    sets=7, status=status, reason=reason)
    if status == OK:
        f.rounds = [[us, us], [us, us * 1.02]]
    return f


def sample_floors():
    """The empty kernel and the copies at 4096 and 5120 every way; the copy at 8192 failed. Graph figures
    differ from back-to-back ones, so that a comparison with the wrong floor shows."""
    out = []
    for kernel, hidden, base in (("empty", None, 1.8), ("copy", 4096, 2.0), ("copy", 5120, 2.1)):
        for method, pdl in floor.METHODS:
            out.append(floor_rec(kernel, hidden, method, pdl,
                                 base - (0.5 if pdl else 0.0) - (0.3 if method == floor.GRAPH else 0.0)))
    out += [floor_rec("copy", 8192, m, pdl, 0, status=FAILED, reason="validation: the one-row copy did not reproduce")
            for m, pdl in floor.METHODS]
    return out


def test_copy_threads_one_per_vector_at_most_1024():
    assert [floor.copy_threads(h) for h in (8, 4096, 5120, 8192, 16384)] == [1, 512, 640, 1024, 1024]
    for bad in (0, 5, 5125):
        with pytest.raises(ValueError, match=f"a bf16 row of {bad} elements is not a whole number of 16-byte vectors"):
            floor.copy_threads(bad)


def test_floor_hiddens_are_the_targets_and_the_runs_decode_shapes():
    cfg = config.Config(shapes=config.grid((1, 128, 4096), (2048, 5120, 16384)))
    assert cfg.floor_hiddens() == (2048, 4096, 5120, 8192, 16384)
    only_large = config.Config(shapes=config.grid((1024, 4096), (5120,)))
    assert only_large.floor_hiddens() == config.FLOOR_HIDDEN == (4096, 5120, 8192)


def test_floor_kernels_compile_and_wait_before_their_first_read():
    ptx = compiler.compile_text("pyrms_bench_floor.cu", floor.FLOOR_SOURCE, arch="sm_90", want_ptx=True).ptx
    empty, copy = (body.split("ret;")[0] for body in ptx.split(".entry ")[1:])
    assert empty.startswith(floor.EMPTY_NAME) and copy.startswith(floor.COPY_NAME)
    assert re.findall(r"griddepcontrol\.\w+", empty) == ["griddepcontrol.wait", "griddepcontrol.launch_dependents"]
    steps = re.findall(r"griddepcontrol\.\w+|ld\.global[.\w]*|st\.global[.\w]*", copy)
    assert steps[:4] == ["griddepcontrol.wait", "ld.global.nc.v4.u32", "griddepcontrol.launch_dependents",
                         "st.global.v4.u32"]  # 16 bytes per access
    assert "griddepcontrol" not in compiler.compile_text("pyrms_bench_floor.cu", floor.FLOOR_SOURCE, arch="sm_80",
                                                         want_ptx=True).ptx


def test_floor_lookup_takes_only_timed_floors():
    floors = sample_floors()
    assert floor.copy_floor(floors, 4096, False).median_us == pytest.approx(2.0)
    assert floor.copy_floor(floors, 4096, True).median_us == pytest.approx(1.5)
    assert floor.find(floors, "copy", 4096, floor.GRAPH, True).median_us == pytest.approx(1.2)
    assert floor.copy_floor(floors, 8192, False) is None
    assert floor.copy_floor(floors, 8192, False, ok_only=False).status == FAILED
    assert floor.copy_floor(floors, 16384, False) is None and floor.copy_floor(None, 4096, False) is None


def test_floor_section_table():
    text = report.floor_section(sample_floors())
    lines = text.splitlines()
    assert lines[0].startswith("Launch floor: device time per launch")
    head = next(line for line in lines if "back to back" in line and "|" in line)
    assert head.split("|")[1].split() == ["back", "to", "back", "+", "PDL"]
    rows = {"".join(line.split()[:2]): line for line in lines if line.startswith(("  empty ", "  copy ")) and "|" in line}
    assert rows["empty32"].split("|")[1].split() == ["1.80", "+-1%", "1.30", "+-1%"]
    assert rows["copy4096"].split("|")[2].split() == ["1.70", "+-1%", "1.20", "+-1%"]  # graph, graph + PDL
    assert rows["copy4096"].split()[2:4] == ["512", "7"] and rows["copy4096"].split("|")[-1].split() == ["100"]
    assert rows["copy8192"].split("|")[1].split() == ["FAIL", "FAIL"]
    assert "  copy 8192 failed: validation: the one-row copy did not reproduce" in lines
    assert report.floor_section(None) == "" and report.floor_section([]) == ""


def test_decode_table_against_the_floors():
    records = [rec("pyrms_nopdl", 1, 4096, 3.0), rec("pyrms", 1, 4096, 1.8), rec("pyrms_nopdl", 5, 5120, 4.2),
               rec("pyrms", 5, 5120, 0, status=SKIPPED, reason="no pdl"), rec("pyrms_nopdl", 1, 8192, 2.5),
               rec("pyrms_nopdl", 4096, 4096, 20.0), rec("pyrms_nopdl", 1, 4096, 9.0, dtype="float32")]
    text = report.decode_floor_table(records, sample_floors())
    rows = {tuple(map(int, line.split()[:2])): line for line in text.splitlines() if line[:6].strip().isdigit()}
    assert set(rows) == {(1, 4096), (5, 5120), (1, 8192)}  # bf16, <= 128 tokens
    assert rows[(1, 4096)].split("|")[1].split() == ["3.00", "2.00", "1.50"]      # x the floor without PDL
    assert rows[(1, 4096)].split("|")[2].split() == ["1.80", "1.50", "1.20"]      # x the PDL floor
    assert rows[(5, 5120)].split("|")[1].split() == ["4.20", "2.10", "2.00"]
    assert rows[(5, 5120)].split("|")[2].split() == ["-", "1.60", "-"]
    assert rows[(1, 8192)].split("|")[1].split() == ["2.50", "-", "-"]           # its floor failed
    assert report.decode_floor_table(records, None) == ""
    assert report.decode_floor_table([rec("pyrms_nopdl", 4096, 4096, 20.0)], sample_floors()) == ""


def test_floor_targets_use_the_back_to_back_copy_floor():
    floors = sample_floors()  # back to back: 2.0 / 1.5 at 4096, 2.1 / 1.6 at 5120; graphs 0.3 lower
    found = targets.evaluate([rec("pyrms_nopdl", 1, 4096, 3.19), rec("pyrms_nopdl", 1, 5120, 3.4),
                              rec("pyrms", 1, 4096, 1.95), rec("pyrms", 1, 5120, 2.1)], None, None, floors)
    got = {(t.text.split(":")[0], "with PDL" in t.text): t for t in found if t.group == "floor"}
    assert len(got) == 6
    t = got[("bf16 rms_norm 1x4096", False)]
    assert t.status == targets.PASS and t.detail == "3.19 us / floor 2.00 us = 1.595" and "<= 1.6 x" in t.text
    assert got[("bf16 rms_norm 1x5120", False)].status == targets.FAIL                # 3.4 / 2.1 = 1.62
    t = got[("bf16 rms_norm 1x4096", True)]
    assert t.status == targets.PASS and t.detail == "1.95 us / floor 1.50 us = 1.300" and "with PDL" in t.text
    assert got[("bf16 rms_norm 1x5120", True)].status == targets.FAIL                 # 2.1 / 1.6 = 1.31
    t = got[("bf16 rms_norm 1x8192", False)]
    assert t.status == targets.NA and t.detail == "pyrms (no pdl) not timed at 1x8192"
    found = targets.evaluate([rec("pyrms_nopdl", 1, 8192, 3.0)], None, None, floors)
    t = next(t for t in found if t.group == "floor" and "1x8192: pyrms (no pdl) device" in t.text)
    assert t.status == targets.NA and t.detail.startswith("copy floor failed: validation")
    assert all(t.status == targets.NA for t in targets.evaluate([rec("pyrms", 1, 4096, 2.0)], None) if t.group == "floor")


def test_decode_targets_against_the_fastest_other():
    records = [rec("pyrms_nopdl", 1, 4096, 2.0), rec("pyrms", 1, 4096, 1.0), rec("torch", 1, 4096, 3.0),
               rec("compile", 1, 4096, 2.6), rec("pyrms_nopdl", 5, 4096, 2.2), rec("triton", 5, 4096, 2.6),
               rec("pyrms_nopdl", 32, 4096, 2.0), rec("seed", 32, 4096, 1.0), rec("pyrms", 1, 5120, 1.0),
               rec("torch", 1, 5120, 3.0)]
    decode = [t for t in targets.evaluate(records, None) if t.group == "decode"]
    found = {t.text.split(" (decode)")[0].split()[-1]: t for t in decode}
    assert len(decode) == 12 and set(found) == {f"{t}x{h}" for t in (1, 5, 32, 128) for h in (4096, 5120, 8192)}
    assert found["1x4096"].status == targets.PASS and found["1x4096"].detail == \
        "pyrms (no pdl) 2.00 us / torch.compile 2.60 us = 0.769"
    assert ("pyrms (no pdl) <= 0.8 x the fastest of torch eager, torch.compile, Triton, Liger and FlashInfer"
            in found["1x4096"].text)
    assert found["5x4096"].status == targets.FAIL                                       # 2.2 / 2.6 = 0.846
    assert found["32x4096"].status == targets.NA and found["32x4096"].detail == "no other implementation timed"
    # pyrms with PDL (1.0 us) is never set against torch eager, which launches without it
    assert found["1x5120"].status == targets.NA and found["1x5120"].detail == "pyrms (no pdl) not timed at 1x5120"
    # with a peer that has PDL, pyrms with PDL is judged against that peer too, as a target of its own
    records += [rec("flashinfer_pdl", 1, 4096, 1.5), rec("flashinfer", 1, 4096, 2.4)]
    decode = [t for t in targets.evaluate(records, None) if t.group == "decode"]
    assert len(decode) == 13
    with_pdl = by_text(decode, "1x4096 (decode): pyrms <= 0.8 x the fastest of FlashInfer (pdl)")
    assert with_pdl.status == targets.PASS and with_pdl.detail == "pyrms 1.00 us / FlashInfer (pdl) 1.50 us = 0.667"


def test_pyrms_nopdl_calls_rms_norm_with_pdl_only_where_it_has_the_keyword(monkeypatch):
    import pyrms
    from pyrms.bench import impls, registry

    problem = types.SimpleNamespace(ptrs=lambda name: {"x": [0x100, 0x200], "y": [0x300, 0x400]}[name],
                                    weight=types.SimpleNamespace(ptr=0x500), tokens=1, hidden=4096, dt=dtypes.BFLOAT16)
    ctx = impls.Context(stream=0x77, epsilon=1e-6)
    calls = []

    def rms_norm(out, input, weight, epsilon, num_tokens=None, hidden_size=None, *, dtype=None, stream=None,
                 pdl="default"):
        calls.append((out, input, weight, epsilon, num_tokens, hidden_size, dtype, stream, pdl))

    monkeypatch.setattr(pyrms, "rms_norm", lambda out, input, weight, epsilon, *a, dtype=None, stream=None: None)
    with pytest.raises(impls.Unavailable, match="rms_norm has no pdl= keyword"):
        registry.make("rms_norm", "pyrms_nopdl", ctx, problem)
    monkeypatch.setattr(pyrms, "rms_norm", rms_norm)
    for name in ("pyrms", "pyrms_nopdl"):
        registry.make("rms_norm", name, ctx, problem).launch(1)
    # the plain implementation leaves pdl to the op's default (on); pyrms_nopdl turns it off
    assert calls == [(0x400, 0x200, 0x500, 1e-6, 1, 4096, "bfloat16", 0x77, pdl) for pdl in ("default", False)]


# -- command line ----------------------------------------------------------------------------------

def parse(*argv):
    return cli.build_config(cli.build_parser().parse_args(list(argv)), now=datetime.datetime(2026, 1, 2, 3, 4, 5))


def test_defaults_and_quick():
    full = parse()
    assert len(full.shapes) == 32 and full.rounds == 3 and full.reps == 10 and full.compile_tokens is None
    assert full.dtypes == ("bfloat16",) and full.impls == config.IMPLS and full.stem == "bench-20260102-030405"
    assert full.ops[0] == "rms_norm" and full.extra_op_shapes == (config.Shape(32, 5120), config.Shape(16384, 5120))
    quick = parse("--quick")
    assert {(s.tokens, s.hidden) for s in quick.shapes} == {(t, h) for t in (1, 128, 4096, 16384) for h in (5120, 8192)}
    assert quick.rounds == 2 and quick.reps == 5 and quick.compile_tokens == 16384 and quick.stem.endswith("-quick")
    assert quick.compile_at("rms_norm", config.Shape(16384, 5120))
    assert not quick.compile_at("rms_norm", config.Shape(4096, 5120))
    assert not quick.compile_at("fused_add_rms_norm", config.Shape(16384, 5120))
    assert full.compile_at("fused_add_rms_norm", config.Shape(16384, 5120))
    assert any("torch.compile runs only for rms_norm at 16384" in n for n in quick.notes)
    explicit = parse("--ops", "fused_add,backward", "--shapes", "1024x4096", "--dtypes", "fp16,bf16,fp32",
                     "--impls", "eager,torch.compile,pyrms")
    assert explicit.ops == ("fused_add_rms_norm", "rms_norm_backward") and explicit.extra_op_shapes is None
    assert explicit.shapes_for("rms_norm_backward") == (config.Shape(1024, 4096),)
    assert explicit.dtypes == ("bfloat16", "float16", "float32")
    assert explicit.impls == ("pyrms", "pyrms_nopdl", "torch", "compile")  # like for like: see the test below
    assert explicit.impls_for("rms_norm_backward") == ("pyrms", "pyrms_nopdl", "torch", "compile")
    assert full.floor and full.sweep and not parse("--no-floor").floor
    grid = parse("--tokens", "32,1", "--hidden", "4096", "--out", "/tmp/x", "--name", "n")
    assert grid.shapes == (config.Shape(1, 4096), config.Shape(32, 4096)) and str(grid.json_path) == "/tmp/x/n.json"


def test_impls_with_pyrms_and_a_peer_without_pdl_time_pyrms_without_pdl_too():
    asked = parse("--impls", "pyrms,torch,compile,liger")
    assert asked.impls == ("pyrms", "pyrms_nopdl", "torch", "compile", "liger")
    assert any(n.startswith("pyrms_nopdl added to --impls: pyrms without PDL is the figure set against torch eager, "
                            "torch.compile and Liger") for n in asked.notes)
    for impls in ("pyrms", "pyrms,flashinfer_pdl", "pyrms_nopdl,triton", "pyrms,pyrms_nopdl,seed"):
        config_ = parse("--impls", impls)
        assert config_.impls == cli.cfg.parse_impls(impls) and not any("added" in n for n in config_.notes)
    assert parse("--impls", "pyrms,seed").impls == ("pyrms", "pyrms_nopdl", "seed")


def test_the_run_loads_pytorch_for_every_implementation_outside_pyrms():
    from pyrms.bench import run

    assert set(run.TORCH_IMPLS) == set(config.IMPLS) - {"pyrms", "pyrms_nopdl", "seed"}
    assert set(config.OTHER_IMPLS + config.OTHER_PDL_IMPLS) == set(run.TORCH_IMPLS)  # each peer compared somewhere


def test_every_op_with_peers_times_pyrms_both_ways():
    for name, bench in ops.benches().items():
        if any(i in bench.impls for i in config.OTHER_IMPLS + ("seed",)):
            assert {"pyrms", "pyrms_nopdl"} <= set(bench.impls), name


@pytest.mark.parametrize("op, module, cls", [("fused_add_rms_norm", fused_add_bench, "PyrmsFusedAdd"),
                                             ("rms_norm_backward", backward_bench, "PyrmsBackward")])
def test_pyrms_nopdl_of_the_other_ops_launches_with_pdl_false(op, module, cls, monkeypatch):
    calls = []

    def init(self, ctx, p):  # the operands' set-up needs a GPU; the call's keywords are what is checked
        self.fn = lambda *args, **kwargs: calls.append(kwargs)
        self.p, self.w, self.eps, self.stream = types.SimpleNamespace(tokens=1, hidden=8), None, 1e-6, 0
        for name in ("x", "r", "dx", "dw", "dy", "rstd"):
            setattr(self, name, [None])

    monkeypatch.setattr(getattr(module, cls), "__init__", init)
    for name in ("pyrms", "pyrms_nopdl"):
        ops.get(op).impls[name](None, None).launch(0)
    assert [k["pdl"] for k in calls] == [True, False]


@pytest.mark.parametrize("argv, fragment", [
    (["--shapes", "4096by5120"], "--shapes: '4096by5120' is not TOKENSxHIDDEN"),
    (["--shapes", "0x5120"], "is not a positive integer"),
    (["--tokens", "1,x"], "--tokens: 'x' is not a positive integer"),
    (["--dtypes", "int8"], "--dtypes: dtype 'int8' is not supported; allowed: bfloat16, float16, float32 (aliases: bf16"),
    (["--impls", "cupy"], "--impls: 'cupy' is not one of pyrms, pyrms_nopdl, seed, torch, compile, triton"),
    (["--ops", "layer_norm"], "--ops: 'layer_norm' is not one of"),
    (["--shapes", "1x4096", "--tokens", "1"], "--shapes replaces --tokens and --hidden"),
    (["--rounds", "0"], "is not a positive integer"),
    (["--memory-cap", "0"], "--memory-cap must be > 0"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, fragment, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m pyrms.bench: error: ") and fragment in err
    assert "(see --help)" in err


def test_help_exits_0_and_explains(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for needle in ("--quick", "--shapes", "--impls", "--ops", "--dtypes", "copy ceiling", "Exit status", "--no-floor",
                   "skip the launch floor", "pyrms_nopdl"):
        assert needle in out


@pytest.mark.skipif(driver.unavailable_reason() is None, reason="a CUDA GPU is present: the no-GPU path cannot be shown")
def test_without_a_gpu_one_line_and_nonzero_exit():
    run = subprocess.run([sys.executable, "-m", "pyrms.bench", "--quick"], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("python -m pyrms.bench: no CUDA GPU available: ")
    assert "Traceback" not in run.stderr


def test_spin_kernel_compiles_with_nvrtc():
    cubin = timing.compile_spin("sm_90")
    assert isinstance(cubin, bytes) and len(cubin) > 100
    assert timing.initial_spin_us(10.0, 100) == 2050.0 and timing.initial_spin_us(0.0, 1) == 100.0
    assert timing.initial_spin_us(1e9, 100) == timing.MAX_SPIN_US


def test_median_us_each_times_each_run_and_reports_the_ones_that_fail(capsys):
    """The tools' side-by-side timing (tools/rms_norm_quant/bench.py, tools/rms_norm/bench_qk_norm.py) over a timer without a
    device: a run that fails at its first call, at the synchronize after it, or while being timed gets None
    and one stderr line, and the next is still timed."""
    log = []

    class Timer:  # the two EventTimer methods median_us uses
        def warm_up(self, run, sets, at_least):
            for i in range(max(sets, at_least)):
                run(i % sets)
            return 1.0

        def samples(self, run, state, count):
            assert (state.sets, state.batch, count) == (2, 20, 3)
            run(state.cursor)
            return [3.0, 1.0, 2.0] if log[-1][0] == "a" else [5.0, 4.0, 6.0]  # medians 2 and 5

    def run_of(name, fail_at=None):
        def run(i):
            log.append((name, i))
            if i == fail_at:
                raise ValueError(f"{name} cannot run set {i}")
        return run

    def synchronize():
        if log[-1] == ("async", 0):
            raise RuntimeError("an illegal address, found at the synchronize")

    runs = {"a": run_of("a"), "first": run_of("first", fail_at=0), "async": run_of("async"),
            "timed": run_of("timed", fail_at=1), "e": run_of("e")}
    us = timing.median_us_each(Timer(), runs, 2, 3, synchronize=synchronize, where="q T=16",
                               after_first=lambda name: log.append(("after first", name)))
    assert us == {"a": 2.0, "first": None, "async": None, "timed": None, "e": 5.0}  # in the runs' order
    assert log[:3] == [("a", 0), ("after first", "a"), ("a", 0)]  # first call, hook, then the warm-up
    assert [entry[1] for entry in log if entry[0] == "after first"] == ["a", "timed", "e"]
    assert capsys.readouterr().err.splitlines() == [
        "  first failed at q T=16: ValueError: first cannot run set 0",
        "  async failed at q T=16: RuntimeError: an illegal address, found at the synchronize",
        "  timed failed at q T=16: ValueError: timed cannot run set 1",
    ]
    assert timing.cells(us) == "a=2.00 first=n/a async=n/a timed=n/a e=5.00"
    assert timing.median_us_each(Timer(), {}, 2, 3, synchronize=synchronize, where="") == {}


# -- whole runs on a simulated GPU -------------------------------------------------------------------

OK_STATUS = real_cu.CUresult.CUDA_SUCCESS
SLOT = {"ptr": "Q", "i32": "i", "i64": "q", "f32": "f"}
CTYPES = {"__nv_bfloat16": dtypes.BFLOAT16, "__half": dtypes.FLOAT16, "float": dtypes.FLOAT32}


class SimGpu:
    """A cuda.bindings.driver stand-in: host memory as device memory, numpy kernels, a simulated clock.

    Kernels run when launched (or, on a capturing stream, when the graph is launched); each advances
    the device clock by its bytes over SIM_GBPS plus SIM_LAUNCH_US (SIM_PDL_SAVING_US less when
    launched with programmatic dependent launch), copies by theirs over COPY_GBPS, the spin kernel by
    its argument. Events read the clock, so elapsed times are those durations.
    """

    SIM_GBPS, COPY_GBPS, SIM_LAUNCH_US, SIM_PDL_SAVING_US = 3000.0, 4000.0, 2.0, 0.5

    def __init__(self, corrupt=None):
        self.corrupt = corrupt  # a kernel name fragment whose output gets a wrong value
        self.blocks = {}
        self.functions = {}
        self.next_handle = 0x1000
        self.clock_us = 0.0
        self.events = {}
        self.capturing = {}
        self.graphs = {}
        self.launched = collections.Counter()
        self.threads = threading.local()
        self.device_count = 1
        self.owners = {}  # allocation -> the ordinal of the device whose context was current (0xC000 + ordinal)
        self.launch_contexts = collections.Counter()

    def __getattr__(self, name):
        if name.startswith("cu"):
            raise AttributeError(f"SimGpu has no {name}")
        return getattr(real_cu, name)

    def _handle(self, kind):
        self.next_handle += 0x10
        return kind(self.next_handle)

    def _stack(self):
        if not hasattr(self.threads, "stack"):
            self.threads.stack = []
        return self.threads.stack

    def _view(self, address, count, np_dtype):
        nbytes = count * np.dtype(np_dtype).itemsize
        if not any(start <= address and address + nbytes <= start + len(b) for start, b in self.blocks.items()):
            raise AssertionError(f"access to [{address:#x}, +{nbytes}) outside every allocation")
        return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=np_dtype)

    # context, device
    def cuInit(self, flags): return (OK_STATUS,)
    def cuDeviceGetCount(self): return (OK_STATUS, self.device_count)
    def cuDeviceGet(self, ordinal): return (OK_STATUS, real_cu.CUdevice(ordinal))
    def cuDeviceGetName(self, length, dev): return (OK_STATUS, b"Simulated H200\0".ljust(length, b"\0"))
    def cuDeviceTotalMem(self, dev): return (OK_STATUS, 1 << 34)
    def cuMemGetInfo(self): return (OK_STATUS, 1 << 33, 1 << 34)
    def cuDevicePrimaryCtxRetain(self, dev): return (OK_STATUS, real_cu.CUcontext(0xC000 + int(dev)))
    def cuCtxSynchronize(self): return (OK_STATUS,)

    def cuDeviceGetAttribute(self, attribute, dev):
        a = real_cu.CUdevice_attribute
        return (OK_STATUS, {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                            a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
                            a.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 1 << 20,
                            a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
                            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448}[attribute])

    def cuCtxGetCurrent(self):
        stack = self._stack()
        return (OK_STATUS, real_cu.CUcontext(stack[-1] if stack else 0))

    def cuCtxSetCurrent(self, ctx):
        stack = self._stack()
        stack[-1:] = [int(ctx)]
        return (OK_STATUS,)

    def cuCtxPushCurrent(self, ctx):
        self._stack().append(int(ctx))
        return (OK_STATUS,)

    def cuCtxPopCurrent(self):
        return (OK_STATUS, real_cu.CUcontext(self._stack().pop()))

    # streams, events
    def cuStreamCreate(self, flags): return (OK_STATUS, self._handle(real_cu.CUstream))
    def cuStreamDestroy(self, stream): return (OK_STATUS,)
    def cuStreamSynchronize(self, stream): return (OK_STATUS,)
    def cuEventCreate(self, flags): return (OK_STATUS, self._handle(real_cu.CUevent))
    def cuEventDestroy(self, event): return (OK_STATUS,)
    def cuEventSynchronize(self, event): return (OK_STATUS,)

    def cuEventRecord(self, event, stream):
        self.events[int(event)] = self.clock_us
        return (OK_STATUS,)

    def cuEventElapsedTime(self, start, end):
        return (OK_STATUS, (self.events[int(end)] - self.events[int(start)]) / 1e3)

    # memory
    def cuMemAlloc(self, nbytes):
        block = (ctypes.c_char * nbytes)()
        self.blocks[ctypes.addressof(block)] = block
        self.owners[ctypes.addressof(block)] = self._current_context() - 0xC000
        return (OK_STATUS, real_cu.CUdeviceptr(ctypes.addressof(block)))

    def cuMemFree(self, ptr):
        self.blocks.pop(int(ptr))
        return (OK_STATUS,)

    def cuMemcpyHtoD(self, dst, src, nbytes):
        self._view(int(dst), nbytes, np.uint8)
        ctypes.memmove(int(dst), src, nbytes)
        return (OK_STATUS,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self._view(int(src), nbytes, np.uint8)
        ctypes.memmove(dst, int(src), nbytes)
        return (OK_STATUS,)

    def cuMemcpyDtoD(self, dst, src, nbytes):
        self._view(int(dst), nbytes, np.uint8), self._view(int(src), nbytes, np.uint8)
        ctypes.memmove(int(dst), int(src), nbytes)
        self.clock_us += 2 * nbytes / self.COPY_GBPS / 1e3
        return (OK_STATUS,)

    def cuMemsetD8(self, ptr, byte, nbytes):
        self._view(int(ptr), nbytes, np.uint8)[:] = byte
        return (OK_STATUS,)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream): return self.cuMemcpyHtoD(dst, src, nbytes)
    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream): return self.cuMemcpyDtoH(dst, src, nbytes)
    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream): return self.cuMemcpyDtoD(dst, src, nbytes)
    def cuMemsetD8Async(self, ptr, byte, nbytes, stream): return self.cuMemsetD8(ptr, byte, nbytes)

    def cuPointerGetAttribute(self, attribute, ptr):
        return (OK_STATUS, next(self.owners[start] for start, b in self.blocks.items() if start <= ptr < start + len(b)))

    def _current_context(self):
        stack = self._stack()
        return stack[-1] if stack else 0

    # modules, libraries, kernels, graphs
    def cuFuncSetAttribute(self, function, attribute, value): return (OK_STATUS,)

    def cuLibraryLoadData(self, code, *options): return (OK_STATUS, self._handle(real_cu.CUlibrary))
    def cuKernelSetAttribute(self, attribute, value, kernel, dev): return (OK_STATUS,)

    def cuLibraryGetKernel(self, library, name):
        handle = self._handle(real_cu.CUkernel)
        self.functions[int(handle)] = name.decode()
        return (OK_STATUS, handle)

    def cuKernelGetFunction(self, kernel):
        handle = self._handle(real_cu.CUfunction)
        self.functions[int(handle)] = self.functions[int(kernel)]
        return (OK_STATUS, handle)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return self._launch(f, gx, bx, stream, params, self.SIM_LAUNCH_US)

    def cuLaunchKernelEx(self, config, f, params, extra):
        pdl = any(a.id == PDL and a.value.programmaticStreamSerializationAllowed
                  for a in config.attrs[:config.numAttrs])
        launch_us = self.SIM_LAUNCH_US - (self.SIM_PDL_SAVING_US if pdl else 0.0)
        return self._launch(f, config.gridDimX, config.blockDimX, config.hStream, params, launch_us)

    def _launch(self, f, gx, bx, stream, params, launch_us):
        self.launch_contexts[self._current_context()] += 1
        name = self.functions[int(f)]
        signature = self._signature(name)
        values = []
        for i, kind in enumerate(signature):
            slot = ctypes.c_void_p.from_address(params + 8 * i).value
            values.append(struct.unpack_from("<" + SLOT[kind], (ctypes.c_char * 8).from_address(slot))[0])
        work = (name, gx, bx, tuple(values), launch_us)
        if int(stream) in self.capturing:
            self.capturing[int(stream)].append(work)
        else:
            self._run(*work)
        return (OK_STATUS,)

    def cuStreamBeginCapture(self, stream, mode):
        self.capturing[int(stream)] = []
        return (OK_STATUS,)

    def cuStreamEndCapture(self, stream):
        graph = self._handle(real_cu.CUgraph)
        self.graphs[int(graph)] = self.capturing.pop(int(stream))
        return (OK_STATUS, graph)

    def cuGraphInstantiate(self, graph, flags):
        graph_exec = self._handle(real_cu.CUgraphExec)
        self.graphs[int(graph_exec)] = self.graphs[int(graph)]
        return (OK_STATUS, graph_exec)

    def cuGraphLaunch(self, graph_exec, stream):
        for work in self.graphs[int(graph_exec)]:
            self._run(*work)
        return (OK_STATUS,)

    def cuGraphExecDestroy(self, graph_exec): return (OK_STATUS,)
    def cuGraphDestroy(self, graph): return (OK_STATUS,)
    def cuGetErrorName(self, status): return (OK_STATUS, status.name.encode())
    def cuGetErrorString(self, status): return (OK_STATUS, b"simulated")

    @staticmethod
    def _signature(name):
        if name == timing.SPIN_NAME:
            return ("i64",)
        if name == floor.EMPTY_NAME:
            return ()
        if name == floor.COPY_NAME:
            return floor.COPY_SIGNATURE
        source, _, expression = name.partition("::")
        if source in ("rms_norm.cu", "seed_rms_norm.cu"):  # "source::namespace::kernel<...>"
            return contract.contract(source, expression.split("<")[0].rsplit("::", 1)[-1]).signature
        raise AssertionError(f"the simulator has no kernel {name}")

    def _run(self, name, grid, block, values, launch_us):
        self.launched[name.split("<")[0]] += 1
        if name == timing.SPIN_NAME:
            self.clock_us += values[0] / 1e3
            return
        if name == floor.EMPTY_NAME:
            self.clock_us += launch_us
            return
        if name == floor.COPY_NAME:
            dst, src, vectors = values
            self._view(dst, 16 * vectors, np.uint8)[:] = self._view(src, 16 * vectors, np.uint8)
            self.clock_us += 2 * 16 * vectors / self.SIM_GBPS / 1e3 + launch_us
            return
        dt = CTYPES[re.search(r"<\s*([\w:]+)", name).group(1)]
        tokens = grid
        if name.startswith("rms_norm.cu::pyrms::rms_norm_nd_kernel"):  # packed short rows of a plain layout
            out, x, w, eps, tokens, d1, d2, hidden, x_stride, _, _, o_stride, _, _, w_stride = values
            assert (d1, d2, w_stride) == (1, 1, 0), "the simulator runs rms_norm_nd_kernel on one row stride only"
        elif name.startswith("rms_norm.cu::"):
            assert len(values) == 8, ("the simulator runs rms_norm.cu as (out, x, w, rstd, eps, hidden, x_stride, "
                                      f"out_stride), but pyrms launched {len(values)} arguments: update SimGpu._run")
            out, x, w, rstd, eps, hidden, x_stride, o_stride = values
            assert rstd == 0, "the benchmark stores no rstd"
        else:  # the seed kernel: hidden = threads x VEC_SIZE (its template's second argument)
            out, x, w, eps = values
            hidden = block * int(re.search(r"<\s*[\w:]+,\s*(\d+)", name).group(1))
            x_stride = o_stride = hidden
        isz = dt.itemsize
        xs = np.lib.stride_tricks.as_strided(self._view(x, (tokens - 1) * x_stride + hidden, dt.numpy),
                                             (tokens, hidden), (x_stride * isz, isz)).astype(np.float32)
        ys = np.lib.stride_tricks.as_strided(self._view(out, (tokens - 1) * o_stride + hidden, dt.numpy),
                                             (tokens, hidden), (o_stride * isz, isz), writeable=True)
        ws = self._view(w, hidden, dt.numpy).astype(np.float32)
        inv = np.float32(1) / np.sqrt(np.mean(xs * xs, axis=1, keepdims=True) + np.float32(eps))
        y = ((xs * inv).astype(dt.numpy).astype(np.float32) * ws).astype(dt.numpy)
        if self.corrupt and name.startswith(self.corrupt):
            y[-1, -1] = np.nan
        ys[...] = y
        self.clock_us += (2 * tokens * hidden + hidden) * isz / self.SIM_GBPS / 1e3 + launch_us


@pytest.fixture
def sim(monkeypatch):
    from pyrms import compiler
    from pyrms.bench import run as run_module

    gpu = SimGpu()
    fresh_driver_state(monkeypatch.setattr, gpu)

    def compile_source(source, *, arch=None, name_expressions=(), **_):  # no NVRTC: names say what to run
        lowered = {e: f"{source}::{e}" for e in name_expressions}
        return types.SimpleNamespace(cubin=f"{source}:{'|'.join(name_expressions)}".encode(), lowered_names=lowered)

    monkeypatch.setattr(compiler, "compile_source", compile_source)
    monkeypatch.setattr(timing, "compile_spin", lambda arch: b"spin cubin")
    monkeypatch.setattr(floor, "compile_floor", lambda arch: b"floor cubin")
    monkeypatch.setattr(host, "_cuda_bindings_driver", lambda: gpu)
    monkeypatch.setattr(host, "HOST_SHAPE", (1, 256))
    monkeypatch.setattr(host, "GRAPH_SHAPES", ((1, 256), (3, 512)))
    monkeypatch.setattr(host, "GRAPH_LAUNCHES", 10)
    monkeypatch.setattr(run_module, "load_torch", lambda: (None, "PyTorch is not in the simulator"))
    yield gpu
    import gc

    gc.collect()  # finalizers of anything left open run while the simulator is still in place


SIM_ARGS = ["--shapes", "1x512,128x1024,1024x1024,2x16384", "--ops", "rms_norm", "--copy-mib", "1",
            "--host-calls", "400", "--rounds", "2", "--reps", "3", "--batch", "3", "--name", "sim"]


def test_simulated_run_end_to_end(sim, tmp_path, capsys):
    status = cli.main(SIM_ARGS + ["--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    out = captured.out
    data = json.loads((tmp_path / "sim.json").read_text())
    assert (tmp_path / "sim.txt").read_text().strip() == out.strip()
    assert data["partial"] is False and data["device"]["name"] == "Simulated H200"
    assert data["command"].startswith("python -m pyrms.bench --shapes 1x512,128x1024")
    # the ceiling: 2 x 1 MiB per copy at the simulator's copy bandwidth
    assert data["copy_ceiling"]["gbps"] == pytest.approx(SimGpu.COPY_GBPS, rel=1e-6)
    by = {(r["impl"], r["tokens"], r["hidden"]): r for r in data["results"]}
    mine = by[("pyrms", 1024, 1024)]
    assert mine["status"] == "ok" and mine["validation_rel_error"]["y"] < 1e-2
    expected_us = ops.get("rms_norm").bytes_moved(1024, 1024, 2) / SimGpu.SIM_GBPS / 1e3 + SimGpu.SIM_LAUNCH_US
    # pyrms launches with PDL by default (the simulated GPU is an sm_90), pyrms_nopdl without
    assert mine["median_us"] == pytest.approx(expected_us - SimGpu.SIM_PDL_SAVING_US, rel=1e-6)
    assert by[("pyrms_nopdl", 1024, 1024)]["median_us"] == pytest.approx(expected_us, rel=1e-6)
    assert len(mine["samples_us_per_round"]) == 2 and all(len(r) == 3 for r in mine["samples_us_per_round"])
    assert mine["rotation_sets"] == 2                    # 4 MiB per set against a 1 MiB L2
    assert by[("pyrms", 1, 512)]["rotation_sets"] == 2 * (1 << 20) // (2 * 1024)  # 2 x L2 in 2 KiB sets
    assert by[("seed", 1024, 1024)]["status"] == "ok"
    seed_wide = by[("seed", 2, 16384)]
    assert seed_wide["status"] == "skipped" and "cannot launch" in seed_wide["reason"]
    for impl in ("torch", "compile", "triton"):
        assert by[(impl, 128, 1024)]["status"] == "skipped"
    assert "PyTorch is not in the simulator" in by[("torch", 128, 1024)]["reason"]
    # sections of the report
    assert "copy ceiling: 4000 GB/s" in out
    assert "rms_norm bfloat16: GB/s per implementation" in out and "device time per launch" in out
    assert "seed skipped at 2x16384: seed kernel cannot launch" in out
    host_data = data["host_overhead"]
    assert set(host_data["per_call_us"]) == {"bare", "pyrms", "rms_norm bound", "rms_norm pyrms.Tensor",
                                             "rms_norm alternating"}
    assert set(host_data["skipped"]) == {"fused_add_rms_norm", "layer_norm", "rms_norm_backward",
                                         "gated_rms_norm", "gated_rms_norm_backward"}  # not simulated
    assert host_data["torch_reason"] == "PyTorch is not in the simulator"
    assert "bare cuLaunchKernel" in out and "pyrms.rms_norm on raw ints" in out and "  rms_norm bound  " in out
    graphs = data["graphs"]["shapes"]
    assert [g["graph_output_matches"] for g in graphs] == [True, True]
    assert [g["op"] for g in graphs] == [ops.headline()] * 2  # the headline's host call, captured
    assert f"CUDA graphs: N pyrms.{ops.headline()} launches captured" in out
    assert "graph replay" in out and "identical to one-by-one's" in out
    # the launch floor: the simulator's launch cost (less its PDL saving) plus the row's bytes
    floors = {(f["kernel"], f["hidden"], f["method"], f["pdl"]): f for f in data["launch_floor"]}
    assert {h for kernel, h, _, _ in floors if kernel == "copy"} == {512, 1024, 4096, 5120, 8192, 16384}
    assert len(floors) == 4 * 7 and all(f["status"] == "ok" for f in floors.values())
    launch_us, pdl_us = SimGpu.SIM_LAUNCH_US, SimGpu.SIM_LAUNCH_US - SimGpu.SIM_PDL_SAVING_US
    assert floors[("empty", None, "back to back", False)]["median_us"] == pytest.approx(launch_us)
    assert floors[("empty", None, "graph", True)]["median_us"] == pytest.approx(pdl_us)
    copy = floors[("copy", 512, "graph", False)]
    assert copy["median_us"] == pytest.approx(2 * 512 * 2 / SimGpu.SIM_GBPS / 1e3 + launch_us)
    assert copy["rotation_sets"] == by[("pyrms", 1, 512)]["rotation_sets"] == copy["launches_per_sample"]
    assert floors[("copy", 5120, "back to back", True)]["median_us"] == pytest.approx(2 * 5120 * 2 / 3e6 + pdl_us)
    assert floors[("copy", 5120, "graph", True)]["launches_per_sample"] == floor.GRAPH_MIN_LAUNCHES
    assert sim.launched[floor.COPY_NAME] > 0 and sim.launched[floor.EMPTY_NAME] > 0
    assert "Launch floor: device time per launch" in out and "decode shapes against the launch floor" in out
    assert by[("pyrms_nopdl", 1, 512)]["status"] == "ok"
    assert "Targets:" in out
    assert {"latency", "floor", "decode"} <= {t["group"] for t in data["targets"]}
    # after a GEMM: its GEMMs and graphs are PyTorch's, which the simulator lacks
    assert data["after_gemm"] == {"reason": "it needs PyTorch (the GEMM, the graph capture): PyTorch is not in the "
                                            "simulator"}
    assert "After a GEMM, in a CUDA graph: not measured (it needs PyTorch" in out
    assert "copy ceiling again at the end" in out and "finished in" in out
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "sim.png").stat().st_size > 10_000
        assert "sim.png" in out
    else:
        assert "no plot: matplotlib is not importable" in captured.err
    # progress went to stderr, one line per problem
    assert captured.err.count("[rms_norm bfloat16 ") == 4


def test_a_problem_of_a_given_number_of_sets_has_exactly_those(sim):
    from pyrms.bench.problem import Problem

    device = driver.get_device(0)
    kwargs = dict(device=device, rng=np.random.default_rng(0), cap_bytes=1 << 30)
    with Problem(ops.get("rms_norm"), "bfloat16", config.Shape(1, 512), **kwargs) as rotated:
        assert rotated.sets == 2 * (1 << 20) // (2 * 1024)  # 2 x L2 in 2 KiB sets
    with Problem(ops.get("rms_norm"), "bfloat16", config.Shape(1, 512), sets=8, **kwargs) as p:
        assert p.sets == 8 and p.pools["x"].nbytes == 8 * p.stride
        assert p.ptr("y", 7) == p.pools["y"].ptr + 7 * p.stride


def test_simulated_run_on_device_1_runs_everything_there(sim, tmp_path, capsys):
    sim.device_count = 2
    status = cli.main(SIM_ARGS + ["--out", str(tmp_path), "--device", "1"])
    assert status == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "sim.json").read_text())
    assert data["device"]["ordinal"] == 1
    assert all(r["status"] in ("ok", "skipped") for r in data["results"])
    assert set(sim.launch_contexts) == {0xC001} and sum(sim.launch_contexts.values()) > 100  # every launch
    assert set(sim.owners.values()) == {1}  # every allocation


@pytest.mark.parametrize("ordinal", ["2", "-1"])
def test_simulated_run_refuses_a_device_ordinal_it_lacks(sim, ordinal, capsys):
    sim.device_count = 2
    with pytest.raises(SystemExit) as info:
        cli.main(SIM_ARGS + ["--device", ordinal])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"python -m pyrms.bench: error: --device: device ordinal {ordinal} is out of range: this machine has 2 "
                   "CUDA device(s), ordinals 0..1 (see --help)\n")
    assert sim.launch_contexts == {}


def test_simulated_run_reports_a_wrong_output_as_failed(sim, tmp_path, capsys):
    sim.corrupt = "rms_norm.cu::"
    status = cli.main(SIM_ARGS + ["--out", str(tmp_path), "--no-host", "--no-graphs", "--impls", "pyrms,seed"])
    out = capsys.readouterr().out
    assert status == 1  # a pyrms output failed validation
    data = json.loads((tmp_path / "sim.json").read_text())
    mine = [r for r in data["results"] if r["impl"] == "pyrms"]
    assert mine and all(r["status"] == "failed" and "validation" in r["reason"] for r in mine)
    assert all(r["samples_us_per_round"] == [] for r in mine)  # never timed
    assert all(r["status"] in ("ok", "skipped") for r in data["results"] if r["impl"] == "seed")
    assert "pyrms failed at" in out and "FAIL" in out


def test_each_ops_own_targets_are_declared_with_its_benchmark(monkeypatch):
    """An op's own targets come from its Bench (its folder's bench.py), judged at the shapes and against the bare
    calls it names; targets.json keeps the cross-op ones and names no op."""
    from pyrms.ops import registry

    declared = {name: b.targets for name, b in ops.benches().items()}
    assert declared["rms_norm_backward"] == ops.Targets(ceiling=0.85, vs_eager=(32, 5120), host=1.25)
    assert declared["fused_add_rms_norm"].ceiling == 0.95 and declared["layer_norm"].host == 1.25
    text = targets.TARGETS_FILE.read_text()
    assert not [name for name in registry.NAMES if re.search(rf"\b{name}\b", text)]
    backward = ops.benches()["rms_norm_backward"]
    edited = dict(ops.benches(), rms_norm_backward=dataclasses.replace(
        backward, targets=ops.Targets(ceiling=0.5, vs_eager=(64, 4096), host=2.0)))
    monkeypatch.setattr(ops, "benches", lambda: edited)  # an edited declaration changes the targets
    found = targets.evaluate([], 4000.0, {"per_call_us": {"bare rms_norm_backward": 1.0, "rms_norm_backward": 1.9}})
    assert by_text(found, "bf16 rms_norm_backward 16384x5120: pyrms >= 0.50").status == targets.NA
    assert by_text(found, "bf16 rms_norm_backward 64x4096: pyrms (no pdl) no slower").status == targets.NA
    assert by_text(found, "host: pyrms.rms_norm_backward (raw ints) <= 2.0").status == targets.PASS


def test_targets_are_read_from_their_data_file(tmp_path):
    data = json.loads(targets.TARGETS_FILE.read_text())
    loaded = targets.load()
    assert loaded["FORWARD_CEILING"][(16384, 5120)] == data["forward"]["ceiling"]["16384x5120"] == targets.FORWARD_CEILING[(16384, 5120)]
    assert loaded["FLOOR_LIMITS"]["pyrms"] == (True, data["decode"]["floor_limits"]["pyrms"]["at_most"])
    assert loaded["EXTRA_OP_SHAPE"] == (16384, 5120) and loaded["DECODE_TOKENS"] == tuple(data["decode"]["tokens"])
    data["extra_ops"]["shape"] = "32x4096"  # an edited file changes the target
    edited = tmp_path / "targets.json"
    edited.write_text(json.dumps(data))
    assert targets.load(edited)["EXTRA_OP_SHAPE"] == (32, 4096)
    del data["host"]["torch_vs_eager"]
    edited.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="targets.json: missing or malformed target \\(KeyError: 'torch_vs_eager'\\)"):
        targets.load(edited)


def test_a_default_run_times_the_other_ops_at_their_targets_shapes(monkeypatch):
    assert cli.extra_op_shapes() == (config.Shape(32, 5120), config.Shape(16384, 5120))
    monkeypatch.setattr(targets, "EXTRA_OP_SHAPE", (4096, 8192))
    assert cli.extra_op_shapes() == (config.Shape(32, 5120), config.Shape(4096, 8192))
