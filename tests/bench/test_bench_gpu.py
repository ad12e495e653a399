"""pyrms.bench on a real GPU, briefly: pyrms and the seed kernel only (no PyTorch import, no
torch.compile; pyrms without PDL is added, as beside any peer without PDL), two small shapes, one round. Checks the run completes, validates and times both,
and writes its files; the full benchmark is `python -m pyrms.bench` (see docs/perf_notes.md). Then, where PyTorch is
importable, the norms after a GEMM in a CUDA graph: a short run of the section, and what one captured graph computes."""
import json

import numpy as np
import pytest

from pyrms import driver, dtypes
from pyrms.bench import after_gemm, cli, config, ops, registry
from pyrms.bench.impls import Context
from pyrms.bench.problem import Problem
from pyrms.tensor import Tensor

pytestmark = pytest.mark.gpu


def test_bench_smoke(tmp_path, capsys):
    status = cli.main(["--shapes", "5x5120,1024x4096", "--ops", "rms_norm", "--impls", "pyrms,seed",
                       "--rounds", "1", "--reps", "3", "--host-calls", "1000", "--copy-mib", "256",
                       "--out", str(tmp_path), "--name", "smoke", "--no-plot", "--no-after-gemm"])
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


def test_after_gemm_section(tmp_path, capsys):
    pytest.importorskip("torch")
    status = cli.main(["--shapes", "1x4096,32x5120", "--ops", "rms_norm", "--impls", "pyrms,torch", "--rounds", "2",
                       "--reps", "3", "--copy-mib", "256", "--no-floor", "--no-host", "--no-graphs",
                       "--out", str(tmp_path), "--name", "gemm", "--no-plot"])
    captured = capsys.readouterr()
    out = captured.out
    assert status == 0, out
    data = json.loads((tmp_path / "gemm.json").read_text())
    after = {(r["impl"], r["tokens"]): r for r in data["after_gemm"]}
    assert set(after) == {(i, t) for i in ("pyrms", "pyrms_nopdl", "torch") for t in (1, 32)}
    for r in after.values():
        assert r["status"] == "ok", r["reason"]
        assert r["validation_rel_error"]["y"] < 1e-2 and r["pairs"] == after_gemm.PAIRS
        assert 0 < r["median_us"] < 50 and r["gemm_median_us"] > 0 and r["replays_per_sample"] >= 2
        assert [len(x) for x in r["samples_us_per_round"]] == [3, 3] == [len(x) for x in r["gemm_us_per_round"]]
    assert "rms_norm bfloat16 after a GEMM, in a CUDA graph" in out
    assert "[after a GEMM rms_norm bfloat16 1x4096] GEMM " in captured.err  # progress, one line per shape


@pytest.mark.parametrize("impl", ["pyrms", "pyrms_nopdl", "torch"])
def test_a_captured_graph_normalizes_what_each_gemm_wrote(impl):
    torch = pytest.importorskip("torch")
    device = driver.set_device(0)
    torch.cuda.set_device(device.ordinal)
    side = torch.cuda.Stream()
    ctx = Context(stream=int(side.cuda_stream), epsilon=1e-6, torch=torch)
    shape, pairs = config.Shape(32, 4096), after_gemm.PAIRS
    with Problem(ops.get("rms_norm"), "bfloat16", shape, device=device, rng=np.random.default_rng(0),
                 cap_bytes=1 << 30, sets=pairs) as p:
        with torch.cuda.stream(side):
            built = registry.make("rms_norm", impl, ctx, p)
            gemms = after_gemm.Gemms(torch, p, 2048)
            graph = after_gemm.capture(torch, side, lambda: gemms.run(built.launch))
        xs = p.torch_rows(torch, "x")
        ys = [torch.from_dlpack(Tensor(built.results(j)["y"], (shape.tokens, shape.hidden), dtypes.BFLOAT16,
                                       device=device.ordinal)) for j in range(pairs)]
        torch.cuda.synchronize()
        for x, y in zip(xs, ys):  # what the replay must write
            x.zero_()
            y.fill_(float("nan"))
        torch.cuda.synchronize()
        graph.replay()  # on the current stream, not the one it was captured on
        torch.cuda.synchronize()
        w = p.torch_weight(torch).float()
        for j in range(pairs):
            torch.testing.assert_close(xs[j].float(), (gemms.a[j] @ gemms.b[j]).float(), rtol=1e-2, atol=1e-2)
            want = torch.nn.functional.rms_norm(xs[j].float(), (shape.hidden,), w, 1e-6)
            assert float((ys[j].float() - want).norm() / want.norm()) < 1e-2, j
        graph.reset()
        built.close()
