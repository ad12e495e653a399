"""tools/autograd_step.py: its arguments (checked before torch is imported), its report, and (GPU) one small run."""
import json

import pytest

from tools import autograd_step


@pytest.mark.parametrize("argv, message", [
    (["--shape", "4096"], "a shape is positive sizes joined by x, e.g. 8x1024x4096; got '4096'"),
    (["--shape", "8x0x4096"], "got '8x0x4096'"),
    (["--steps", "0"], "a positive integer, got '0'"),
    (["--setups", "fp8"], "--setups takes bf16, autocast; got 'fp8'"),
])
def test_bad_arguments_are_named(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        autograd_step.parse(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_defaults_are_the_issue_shape_and_both_setups():
    args = autograd_step.parse([])
    assert args.shape == (8, 1024, 4096) and args.setups == ["bf16", "autocast"] and not args.compile
    assert autograd_step.parse(["--setups", "autocast", "--shape", "2X16"]).setups == ["autocast"]


def test_report_gives_each_median_its_spread_and_the_ratio_to_f_rms_norm():
    args = autograd_step.parse(["--shape", "2x64", "--rounds", "3", "--steps", "2"])
    results = {"bf16": {"outputs": {"F.rms_norm": "bfloat16", "pyrms.torch": "bfloat16"},
                        "times_us": {"F.rms_norm": [100.0, 110.0, 90.0], "pyrms.torch": [80.0, 70.0, 75.0]}}}
    text = autograd_step.report(args, results)
    assert "x [2x64] bfloat16" in text and "3 rounds of 2 steps" in text
    assert "F.rms_norm" in text and "+- 20%" in text and "x F.rms_norm 1.00" in text
    assert "pyrms.torch" in text and "75.0 +- 13%" in text and "x F.rms_norm 0.75" in text


def test_hf_formula_rounds_the_normalized_x_to_its_dtype():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    w = torch.rand(16, dtype=torch.float32) + 0.5
    h = x.double()
    want = w.double() * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16).double()
    got = autograd_step.hf_rms_norm(x, w, 1e-6)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_a_small_run_times_every_implementation_in_both_setups(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert autograd_step.main(["--shape", "2x8x256", "--steps", "2", "--rounds", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bf16:" in text and "autocast:" in text and text.count("x F.rms_norm") == 4
    data = json.loads(out.read_text())
    assert data["shape"] == [2, 8, 256]
    for setup in ("bf16", "autocast"):
        times = data["results"][setup]["times_us"]
        assert set(times) == {"F.rms_norm", "pyrms.torch"} and all(len(v) == 2 and min(v) > 0 for v in times.values())
    assert data["results"]["autocast"]["outputs"]["pyrms.torch"] == "float32"  # the HF formula's dtype with an fp32 weight


def test_profile_report_gives_wall_host_and_each_kernel_per_implementation():
    profiles = {"bf16": {"pyrms.torch": {"wall": 300.0, "host": 250.5, "device": 120.0,
                                         "kernels": {"rms_norm_kernel": 80.0, "norm_backward": 40.0}}}}
    text = autograd_step.profile_report(profiles)
    assert text.splitlines()[0] == "bf16 pyrms.torch: wall 300.0 µs a step, host 250.5, kernels 120.0"
    assert "    80.0  rms_norm_kernel" in text and "    40.0  norm_backward" in text


@pytest.mark.gpu
def test_profile_finds_the_kernels_of_a_step(capsys):
    assert autograd_step.main(["--shape", "4x256", "--steps", "2", "--rounds", "1", "--setups", "bf16",
                               "--profile"]) == 0
    text = capsys.readouterr().out
    for name in ("F.rms_norm", "pyrms.torch"):
        line = next(line for line in text.splitlines() if line.startswith(f"bf16 {name}: wall"))
        assert float(line.rsplit("kernels ", 1)[1]) > 0, line
