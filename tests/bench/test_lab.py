"""What the benchmarks share beside the sweep, without a GPU or PyTorch: the eager baseline's one spelling
(pyrms.bench.eager, given a stand-in torch that records the calls) and the lab benches' row figures and JSON
(pyrms.bench.lab)."""
import json
import sys
import types

import numpy as np
import pytest

from pyrms.bench import eager, lab


def _recording_torch(calls: list):
    """A stand-in torch module whose nn.functional.rms_norm records (shape, normalized_shape, eps) and
    returns the input doubled."""
    def rms_norm(x, normalized_shape, weight, eps):
        calls.append((x.shape, tuple(normalized_shape), weight, eps))
        return 2 * x

    return types.SimpleNamespace(nn=types.SimpleNamespace(functional=types.SimpleNamespace(rms_norm=rms_norm)))


def test_eager_norm_normalizes_the_last_dimension_with_the_epsilon_given():
    calls = []
    norm = eager.norm(_recording_torch(calls), 1e-6)
    x = np.ones((3, 4, 5))
    assert np.array_equal(norm(x, "w"), 2 * x)
    assert calls == [((3, 4, 5), (5,), "w", 1e-6)]


def test_eager_add_norm_normalizes_the_sum_and_returns_it():
    calls = []
    add_norm = eager.add_norm(_recording_torch(calls), 1e-5)
    x, r = np.full((2, 8), 1.0), np.full((2, 8), 2.0)
    y, s = add_norm(x, r, None)
    assert np.array_equal(s, np.full((2, 8), 3.0)) and np.array_equal(y, 2 * s)
    assert calls == [((2, 8), (8,), None, 1e-5)]


def test_figures_are_of_pyrms_without_pdl_against_the_others():
    us = {"pyrms": 1.0, "pyrms (no pdl)": 2.0, "pyrms.torch": 0.5, "torch eager": 6.0, "compile pair": 4.0,
          "triton": None}
    found = lab.figures(us, 4_000_000, 4000.0, versus={"compile_pair": "compile pair"})
    # pyrms's own columns are not "others"; an implementation not timed (None) is left out
    assert found == pytest.approx({"speedup_vs_compile_pair": 2.0, "speedup_vs_fastest_other": 2.0,
                                   "fraction_of_ceiling": 0.5})  # 4 MB in 2 µs: 2 of 4 TB/s
    assert list(found) == ["speedup_vs_compile_pair", "speedup_vs_fastest_other", "fraction_of_ceiling"]
    assert lab.figures(us, 4_000_000, 4000.0, fraction_of="pyrms")["fraction_of_ceiling"] == pytest.approx(1.0)


def test_figures_missing_times_give_none():
    assert lab.figures({"pyrms": 1.0}, 100, 1000.0, versus={"x": "x"}) == {
        "speedup_vs_x": None, "speedup_vs_fastest_other": None, "fraction_of_ceiling": None}
    assert lab.figures({"pyrms (no pdl)": 1.0, "torch": None}, 100, 1000.0)["speedup_vs_fastest_other"] is None


def test_write_json_keeps_the_rows_the_ceiling_and_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench", "--tokens", "1"])
    lab.write_json(str(tmp_path / "out.json"), 3000.0, [{"tokens": 1}])
    assert json.loads((tmp_path / "out.json").read_text()) == {
        "ceiling_gbps": 3000.0, "results": [{"tokens": 1}], "argv": ["bench", "--tokens", "1"]}
