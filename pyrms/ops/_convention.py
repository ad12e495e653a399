"""The two calling conventions of the ops whose output leads in vLLM's order (the RMSNorm and LayerNorm forwards).

- Input first, as FlashInfer, QuACK and ``torch.nn.functional`` call norms: ``op(input, weight, ..., eps=default,
  *, out=None)`` on arrays, positionally or by name; returns ``out``, a new pyrms.Tensor when it is None.
- Out first, vLLM's order (and the seed's): ``op(out, input, weight, ..., epsilon, num_tokens, hidden_size)`` on
  raw device pointers, or on arrays (sizes then read from them; ``out=None`` allocates); positionally, or every
  operand by name (``out=``, ``input=``, ..., ``epsilon=``).

The ops' parameters are named for input first, ``(input, weight, ..., eps, epsilon, num_tokens, hidden_size, *,
out, ...)``, and a call is out first exactly when it gives ``epsilon``. Out first and positional, the parameters
hold out and the operands shifted by one (``input`` holds out, ..., ``eps`` the last operand): the raw-pointer hot
path reads them so, and its only test of the convention is that ``out`` was not given by name. A keyword given
twice (``eps=`` beside a positional eps slot) is Python's own TypeError."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from . import _adapter


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
        optional = "".join(f", {name}=None" for name in self.operands[self.required:])
        return (f"input first (arrays): pyrms.{self.op}({given}{optional}, eps={self.eps:g}, out=None), returning out "
                f"(a new pyrms.Tensor for out=None); out first (vLLM's order; raw device pointers or arrays): "
                f"pyrms.{self.op}(out, {', '.join(self.operands)}, epsilon, num_tokens, hidden_size)")

    def error(self, problem: str) -> TypeError:
        return TypeError(f"pyrms.{self.op}: {problem}. It is called {self.calls()}")


def resolve(form: Form, given: tuple[Any, ...], eps: Any, epsilon: Any, out: Any) -> tuple[Any, ...]:
    """(out, *operands, epsilon), out-first order, of a call from its parameters as bound: ``given`` the operand
    parameters (input, weight, ...), then ``eps``, ``epsilon`` and ``out`` (UNSET where not given). TypeError,
    showing both conventions, for a call that is neither: an operand missing, raw pointers input first, eps
    beside epsilon, out= beside a positional out."""
    names = form.operands
    if epsilon is UNSET:  # input first: each parameter is what it is named
        pointers = [name for name, value in zip(("out", *names), (out, *given)) if type(value) is int]
        if pointers:
            raise form.error(f"{', '.join(pointers)} given as raw device pointers (int) input first; raw pointers "
                             f"go out first, with epsilon and the sizes")
        missing = [name for name, value in zip(names[:form.required], given) if value is UNSET]
        if missing:
            raise form.error(f"{', '.join(missing)} missing (pass None for none)")
        return (None if out is UNSET else out, *(None if value is UNSET else value for value in given),
                form.eps if eps is UNSET else eps)
    if out is UNSET:  # out first, positionally: out and the operands, shifted by one
        values = (*given, eps)
        if isinstance(eps, float):  # a number where the last operand goes (eps= beside epsilon=, or a slip)
            raise form.error(f"{_adapter.bad_kind(names[-1], eps)} {eps!r}: out first, as epsilon is given (eps= is "
                             f"input first's)")
    else:  # out first by name
        if eps is not UNSET:
            raise form.error(f"out= is given beside epsilon and an argument in eps's place: out first takes its "
                             f"operands positionally, out first, or all by name (out=, "
                             f"{', '.join(f'{name}=' for name in names)}), and never eps")
        values = (out, *given)
    missing = [name for name, value in zip(("out", *names), values) if value is UNSET]
    if missing:
        raise form.error(f"{', '.join(missing)} missing before epsilon")
    return (*values, epsilon)
