"""Raw-pointer calls at fake addresses, for the CPU tests of argument validation
(tests/ops/test_family.py, tests/ops/test_norm_backward_weightless.py): validation raises
before any driver call, so the pointers are never dereferenced; every argument a test leaves alone is valid, so the error it sees is the one its own
arguments cause."""
import pyrms

A, B, C, D, E, F = (0x10000 * k for k in range(1, 7))  # fake, 64 KiB apart: disjoint for the sizes used


def backward(layer_norm: bool = False, *, weightless: bool = False, **kw) -> None:
    """pyrms.rms_norm_backward (layer_norm_backward with ``layer_norm``, with a grad_bias) over 4 bfloat16 rows
    of 64, ``kw`` replacing any argument. The operands take A, B, ... in order; ``weightless``: weight and
    grad_weight None, the rest taking the letters in the same order (grad_output B, input C, grad_bias D)."""
    if weightless:
        args = dict(grad_input=A, grad_weight=None, grad_output=B, input=C, weight=None)
    else:
        args = dict(grad_input=A, grad_weight=B, grad_output=C, input=D, weight=E)
    if layer_norm:
        args["grad_bias"] = D if weightless else F
    args.update(epsilon=1e-5, num_tokens=4, hidden_size=64, dtype="bfloat16")
    args.update(kw)
    (pyrms.layer_norm_backward if layer_norm else pyrms.rms_norm_backward)(**args)
