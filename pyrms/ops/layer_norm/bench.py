"""layer_norm's benchmark (pyrms.bench): no sweep problem of its own; its call in the host-time section,
its example call for tools/profile_launch.py and its host-time target."""
from __future__ import annotations

import pyrms

from ...bench.ops import Bench, Targets


def host_call(h):
    """pyrms.layer_norm on raw ints."""
    y, x, w, bias, epsilon, tokens, hidden, common = h.y, h.x, h.w, h.bias, h.epsilon, h.tokens, h.hidden, h.common
    return lambda: pyrms.layer_norm(y, x, w, bias, epsilon, tokens, hidden, **common)


def example(e):
    return lambda: pyrms.layer_norm(e.c, e.a, e.w, e.bias, 1e-5, pdl=e.pdl)


BENCHES = (Bench("layer_norm", host=host_call, example=example, targets=Targets(host=1.25)),)
