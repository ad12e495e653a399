"""N-D row layouts, pure: the leading dimensions of [..., hidden] operands that the N-D kernel
(rms_norm_nd_kernel) addresses, collapsed jointly, and the checks on them.

A layout is (sizes, strides): up to three leading sizes, outermost first, and for each operand its
element strides along them (the hidden dimension is contiguous). The kernel takes exactly three, so
a layout is padded in the middle (``kernel_dims``): the outermost index stays i0, the one a weight
per outer row follows.
"""
from __future__ import annotations

import math

MAX_LEAD = 3  # leading dimensions the kernel addresses


def joint_lead(shape: tuple[int, ...], strides: dict[str, tuple[int, ...]], keep_first: bool,
               hidden: int) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """The fewest leading dimensions that address the same rows of every operand: dimensions of size
    1 dropped, and a dimension merged into the one outside it where every operand steps over it
    contiguously (outer stride = size * inner stride). ``keep_first``: dimension 0 stays its own (a
    weight per outer row follows it). ValueError if more than MAX_LEAD remain."""
    sizes: list[int] = []
    steps: list[dict[str, int]] = []
    first_kept = False
    for i, n in enumerate(shape):
        step = {name: s[i] for name, s in strides.items()}
        if n == 1 and not (keep_first and i == 0):
            continue
        if sizes and not (first_kept and len(sizes) == 1) and all(
                steps[-1][name] == n * step[name] for name in strides):
            sizes[-1] *= n
            steps[-1] = step
            continue
        sizes.append(n)
        steps.append(step)
        first_kept = keep_first and i == 0
    if not sizes:  # a single row
        return (1,), {name: (hidden,) for name in strides}
    if len(sizes) > MAX_LEAD:
        described = ", ".join(f"{name} strides {s}" for name, s in strides.items())
        raise ValueError(f"the leading dimensions {shape} ({described}, in elements) collapse to {len(sizes)} "
                         f"dimensions {tuple(sizes)}; pyrms addresses at most {MAX_LEAD}")
    return tuple(sizes), {name: tuple(st[name] for st in steps) for name in strides}


def contiguous(sizes: tuple[int, ...], hidden: int) -> tuple[int, ...]:
    """The strides of a contiguous [*sizes, hidden] array along its leading dimensions."""
    out, step = [], hidden
    for n in reversed(sizes):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def extent(sizes: tuple[int, ...], strides: tuple[int, ...], hidden: int) -> int:
    """Elements from the first row's start to the end of the farthest row (strides >= 0)."""
    return sum((n - 1) * s for n, s in zip(sizes, strides)) + hidden


def rows_overlap(sizes: tuple[int, ...], strides: tuple[int, ...], hidden: int) -> bool:
    """Whether two rows of the layout may share an element: unless, taken from the smallest stride up,
    each dimension steps past everything inside it (the usual sufficient test; torch's too)."""
    reach = hidden
    for n, s in sorted(((n, s) for n, s in zip(sizes, strides) if n > 1), key=lambda d: d[1]):
        if s < reach:
            return True
        reach += (n - 1) * s
    return False


def kernel_dims(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int, tuple[int, int, int]]:
    """(d1, d2, (s0, s1, s2)) of rms_norm_nd_kernel for a layout of 1 to 3 leading dimensions: padded
    with size-1, stride-0 dimensions in the middle, so that i0 is the layout's outermost index."""
    if len(sizes) == 1:
        return 1, 1, (strides[0], 0, 0)
    if len(sizes) == 2:
        return 1, sizes[1], (strides[0], 0, strides[1])
    return sizes[1], sizes[2], tuple(strides)


def rows(sizes: tuple[int, ...]) -> int:
    return math.prod(sizes)
