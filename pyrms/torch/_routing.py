"""How pyrms.torch's functions route a call (each op's binding, ``pyrms/ops/<family>/torch_binding.py``).

Eagerly, a call goes straight to the launch (the binding's ``launch``: pyrms's raw-pointer API on torch's
pointers), since a torch custom op's dispatch costs more host time than the whole launch; through a
torch.autograd.Function when autograd must record it (grad mode on and an input requiring grad). Under
torch.compile or torch.export, and under a TorchDispatchMode (FakeTensorMode, make_fx tracing,
FlopCounterMode), which must see the op itself rather than a launch through raw pointers, it goes through
the ``torch.ops.pyrms`` custom ops, which torch traces and differentiates.

The functions read these names once, as module globals (``records``, ``dispatch_modes``,
``increment_version``): the eager hot path pays one global lookup per check.
"""
from __future__ import annotations

import torch

increment_version = torch.autograd.graph.increment_version  # tell autograd a raw-pointer write changed a tensor
dispatch_modes = torch._C._len_torch_dispatch_stack  # how many TorchDispatchModes are active


def records(x, weight, other=None) -> bool:
    """Whether autograd must record an eager call on these tensors (weight and other: None where absent)."""
    try:
        return ((x.requires_grad or (weight is not None and weight.requires_grad)
                 or (other is not None and other.requires_grad)) and torch.is_grad_enabled())
    except AttributeError:
        return False  # not tensors: the launch raises the TypeError that says so
