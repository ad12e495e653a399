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
