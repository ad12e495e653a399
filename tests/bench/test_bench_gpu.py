"""pyrms.bench on a real GPU, briefly: pyrms and the seed kernel only (no PyTorch import, no
torch.compile; pyrms without PDL is added, as beside any peer without PDL), two small shapes, one round. Checks the run completes, validates and times both,
and writes its files; the full benchmark is `python -m pyrms.bench` (see docs/perf_notes.md)."""
import json

import pytest

from pyrms.bench import cli

pytestmark = pytest.mark.gpu


def test_bench_smoke(tmp_path, capsys):
    status = cli.main(["--shapes", "5x5120,1024x4096", "--ops", "rms_norm", "--impls", "pyrms,seed",
                       "--rounds", "1", "--reps", "3", "--host-calls", "1000", "--copy-mib", "256",
                       "--out", str(tmp_path), "--name", "smoke", "--no-plot"])
    out = capsys.readouterr().out
    assert status == 0, out
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert data["partial"] is False and data["copy_ceiling"]["gbps"] > 100
    timed = [r for r in data["results"] if r["status"] == "ok"]
    # pyrms_nopdl comes with pyrms beside the seed kernel, which launches without PDL (like for like)
    assert {(r["impl"], r["tokens"]) for r in timed} == {(impl, tokens) for impl in ("pyrms", "pyrms_nopdl", "seed")
                                                         for tokens in (5, 1024)}
    assert "pyrms_nopdl added to --impls" in out
    assert all(r["median_us"] > 0 and r["validation_rel_error"]["y"] < 1e-2 for r in timed)
    assert data["host_overhead"]["per_call_us"]["bare"] > 0
    assert all(g["graph_output_matches"] for g in data["graphs"]["shapes"])
    assert "Targets:" in out
