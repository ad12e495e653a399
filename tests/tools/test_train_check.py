"""tools/train_check.py's arguments, checked before anything imports torch (the runs need a GPU)."""
import pytest

from tools import train_check


@pytest.mark.parametrize("argv, message", [
    (["--models", "llama"], "unknown model 'llama'; choose from qwen3, gemma3"),
    (["--precisions", "fp8"], "unknown precision 'fp8'; choose from bf16, autocast"),
    (["--steps", "3"], "--steps must be at least 6"),
])
def test_bad_arguments_are_named(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        train_check.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_runs_take_their_steps_in_turn_the_order_rotating(monkeypatch):
    calls = []

    def trainer(model, precision, run, data, lr):
        return lambda index: calls.append((index, run)) or (float(index), 0.001 * len(calls))

    monkeypatch.setattr(train_check, "trainer", trainer)
    curves = train_check.train(None, "bf16", [], 4, 1e-3)
    runs = train_check.RUNS
    assert calls == [(i, runs[(i + k) % len(runs)]) for i in range(4) for k in range(len(runs))]
    assert all(curves[run][0] == [0.0, 1.0, 2.0, 3.0] for run in runs)
    # each run's times are its own steps', in step order (a step's time here: its position among all calls)
    for run in runs:
        assert curves[run][1] == [0.001 * (n + 1) for n, (_, r) in enumerate(calls) if r == run]
