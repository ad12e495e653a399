"""The two calling conventions of the ops whose output leads in vLLM's order (rms_norm, layer_norm).

- Input first, as FlashInfer, QuACK and ``torch.nn.functional`` call norms: ``op(input, weight, ..., eps=default,
  *, out=None)`` on arrays; returns ``out``, a new pyrms.Tensor when it is None.
- Out first, vLLM's order (and the seed's): ``op(out, input, weight, ..., epsilon, num_tokens, hidden_size)`` on
  raw device pointers, or on arrays (sizes then read from them; ``out=None`` allocates).

A call's convention is read from its arity: out first always has its epsilon (the positional after the operands,
or ``epsilon=``), input first never does. That costs the raw-pointer path nothing: an epsilon left out is not a
float, which the prepared launch declines anyway, and only then is the convention looked at."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


class Unset:
    """The default of the arguments that only one convention has: told apart from None, which means 'no weight',
    'no bias' or 'allocate the output'."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET: Final = Unset()


@dataclass(frozen=True)
class Form:
    """One op's two conventions: its name, its operands after ``out`` (out-first order), how many of them input
    first requires (the rest default to None), and input first's default eps (its pyrms.torch twin's)."""

    op: str
    operands: tuple[str, ...]
    required: int
    eps: float

    def calls(self) -> str:
        """Both conventions, spelled as calls, for the messages."""
        given = ", ".join(self.operands[:self.required])
        optional = "".join(f"[, {name}]" for name in self.operands[self.required:])  # positional, None if left out
        return (f"input first (arrays): pyrms.{self.op}({given}{optional}, eps={self.eps:g}, out=None), returning out "
                f"(a new pyrms.Tensor for out=None); out first (vLLM's order; raw device pointers or arrays): "
                f"pyrms.{self.op}(out, {', '.join(self.operands)}, epsilon, num_tokens, hidden_size)")

    def error(self, problem: str) -> TypeError:
        return TypeError(f"pyrms.{self.op}: {problem}. It is called {self.calls()}")


def resolve(form: Form, slots: tuple[Any, ...], epsilon: Any, eps: Any, out: Any) -> tuple[Any, ...]:
    """(out, *operands, epsilon) of a call, out-first order, from the positional-only ``slots`` (out and the
    operands out first, the operands and eps input first; UNSET where not given), ``epsilon`` (out first's),
    ``eps`` and ``out`` (input first's keywords). TypeError, showing both conventions, for a call that is
    neither: both epsilons, an argument missing or given twice, raw pointers input first."""
    count = len(form.operands)
    if epsilon is not UNSET:  # out first
        if eps is not UNSET:
            raise form.error(f"epsilon={epsilon!r} (out first) and eps={eps!r} (input first) are both given")
        if out is not UNSET:
            raise form.error("out= is input first's keyword; out first, out is the first argument")
        missing = [name for name, value in zip(("out", *form.operands), slots) if value is UNSET]
        if missing:
            raise form.error(f"{', '.join(missing)} missing before epsilon")
        return (*slots, epsilon)
    operands, last = slots[:count], slots[count]
    pointers = [name for name, value in zip(("out", *form.operands), (out, *operands)) if type(value) is int]
    if pointers:
        raise form.error(f"{', '.join(pointers)} given as raw device pointers (int) input first; raw pointers "
                         f"go out first, with epsilon and the sizes")
    missing = [name for name, value in zip(form.operands[:form.required], operands) if value is UNSET]
    if missing:
        raise form.error(f"{', '.join(missing)} missing (pass None for none)")
    if last is not UNSET:
        if eps is not UNSET:
            raise form.error(f"eps given twice, as the argument after {form.operands[-1]} ({last!r}) and as "
                             f"eps={eps!r}")
        eps = last
    return (None if out is UNSET else out, *(None if value is UNSET else value for value in operands),
            form.eps if eps is UNSET else eps)
