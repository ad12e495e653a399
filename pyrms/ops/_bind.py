"""``pyrms.bind``: one call of an op resolved, checked and packed once, returned as a launch to repeat.

The call runs as usual (every check of its arguments, its prepared launch, its plan) except that its kernel
launches are recorded instead of made (``pyrms.launch.binding``); the recorded launches become a
``pyrms.launch.BoundLaunch``, whose call is one cuLaunchKernelEx per launch on configurations built once. It is
to a call what a CUDA graph is to a stream's work, without a graph's instantiation or its launch's cost.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

from .. import launch
from . import _placement, registry


def _function(op) -> tuple[str, Any]:
    """The registered op ``op`` names (its name, or its public function): (name, function)."""
    name = op if isinstance(op, str) else getattr(op, "__name__", None)
    spec = registry.REGISTRY.get(name) if isinstance(name, str) else None
    function = getattr(importlib.import_module(spec.module), name, None) if spec is not None else None
    if function is None or not (isinstance(op, str) or function is op):
        allowed = ", ".join(n for n, s in registry.REGISTRY.items() if hasattr(importlib.import_module(s.module), n))
        raise TypeError(f"pyrms.bind takes one of pyrms's ops, by name or as the function: {allowed}; got {op!r}")
    return name, function


def bind(op: str | Callable[..., Any], /, *args: Any, **kwargs: Any) -> launch.BoundLaunch:
    """``op(*args, **kwargs)`` (``op`` one of pyrms's ops, as the function or by name, e.g. ``pyrms.layer_norm``)
    resolved, checked and packed once: returns a launch that repeats it, ``bound()`` on the call's stream or
    ``bound(stream)`` on another stream of the same device (checked the first time each stream is passed).

        step = pyrms.bind(pyrms.layer_norm, out, x, w, b, 1e-5, tokens, hidden, stream=s)
        step()      # the same launch as the call, one driver call; errors raise CudaError

    Every argument is checked when binding, as the call checks it, and raises the same errors; what the call
    would launch is then packed with its launch configuration. A bound launch reads and writes the same memory
    every time: keep its operands alive and in place while it is used (it holds the Python objects it was given,
    and ``bound.result``, what the call returned: the new output of an allocating call). Calls that
    allocate per call (a backward without ``workspace=``) cannot be bound (ValueError), nor a call that
    launches nothing (an empty batch). The bound launch runs on the device of the call, from any thread."""
    name, function = _function(op)
    bound = bound_call(functools.partial(function, *args, **kwargs), f"pyrms.bind({name}, ...)")
    bound.operands = (args, kwargs)
    return bound


def bound_call(call: Callable[[], Any], what: str = "pyrms.bind") -> launch.BoundLaunch:
    """The BoundLaunch of what ``call()`` (a call of ops, no arguments) launches: bind's work, for callers
    that hold a ready call (the benchmark's host section). ``what`` names it in errors."""
    with launch.binding() as made:
        result = call()
    if not made:
        raise ValueError(f"{what}: the call launches nothing (an empty batch): nothing to bind")
    device = next((r.device for r in made if r.device is not None), None)
    check_stream = functools.partial(_placement.check, device, {}) if device is not None else None
    return launch.bound(made, result, check_stream)
