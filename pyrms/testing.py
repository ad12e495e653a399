"""Guarded, poisoned device operands at chosen alignments and strides, for proving kernels correct.

Each operand lives inside its own allocation: GUARD elements before and after, and between
strided rows, all filled with a known pattern. Outputs are poisoned with 0xFF bytes (a NaN in
every dtype, and a bit pattern no kernel result has), so that an unwritten element and a write
outside the rows both show up in a bytewise comparison of the whole allocation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import driver, dtypes, plan, reference

GUARD = 64  # elements on each side: more than one 16-byte vector in every dtype


def bits(a: np.ndarray) -> np.ndarray:
    """Raw bits, so that NaN compares equal to itself and -0 differs from +0."""
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@dataclass
class Rows:
    """A [rows, hidden] operand at an element offset and row stride inside a guarded allocation."""

    buffer: driver.DeviceBuffer
    host: np.ndarray  # the whole allocation's intended contents
    offset: int  # elements from the allocation's start to row 0
    rows: int
    hidden: int
    stride: int

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + self.offset * self.host.dtype.itemsize

    def index(self, r: int) -> slice:
        start = self.offset + r * self.stride
        return slice(start, start + self.hidden)

    def values(self) -> np.ndarray:
        """The [rows, hidden] values as the host mirror holds them."""
        return np.stack([self.host[self.index(r)] for r in range(self.rows)])

    def set_values(self, values: np.ndarray) -> None:
        for r in range(self.rows):
            self.host[self.index(r)] = values[r]

    def upload(self, stream=None) -> None:
        driver.memcpy_htod(self.buffer.ptr, self.host, stream)

    def download(self) -> np.ndarray:
        whole = np.empty_like(self.host)
        driver.memcpy_dtoh(whole, self.buffer.ptr)
        return whole

    def close(self) -> None:
        self.buffer.close()


def allocate(rng, dtype, rows: int, hidden: int, *, misalign: int = 0, stride: int | None = None,
             poison: bool = False, low: float = -2.0, high: float = 2.0) -> Rows:
    """A guarded operand: random values (or 0xFF poison), `misalign` elements past a 16-byte boundary.

    cuMemAlloc returns 256-byte aligned memory and GUARD elements are a multiple of 16 bytes,
    so row 0 sits exactly `misalign` elements past a 16-byte boundary.
    """
    dt = dtypes.get(dtype)
    stride = hidden if stride is None else stride
    total = GUARD + misalign + (rows - 1) * stride + hidden + GUARD
    if poison:
        host = np.full(total * dt.itemsize, 0xFF, dtype=np.uint8).view(dt.numpy)
    else:
        host = rng.uniform(low, high, total).astype(dt.numpy)
    operand = Rows(driver.DeviceBuffer(total * dt.itemsize), host, GUARD + misalign, rows, hidden, stride)
    operand.upload()
    return operand


def phases(operand: Rows) -> np.ndarray:
    """Each row's position inside its 16-byte vector, in elements (what the twin needs)."""
    n = 16 // operand.host.dtype.itemsize
    return np.array([(operand.offset + r * operand.stride) % n for r in range(operand.rows)])


def check_rms_norm(rng, dtype, rows, hidden, *, in_off=0, w_off=0, out_off=0, in_stride=None, out_stride=None,
                   gemma=False, round_once=False, in_place=False, epsilon=1e-5, stream=None):
    """One pyrms.rms_norm launch on guarded operands, compared bit for bit with the twin.

    Raises AssertionError on any difference: in the rows, the guards, the gaps between strided
    rows, or the inputs. The offsets are element offsets past a 16-byte boundary.
    """
    from .ops.rms_norm import rms_norm

    dt = dtypes.get(dtype)
    x = allocate(rng, dt, rows, hidden, misalign=in_off, stride=in_stride)
    w = allocate(rng, dt, 1, hidden, misalign=w_off, low=-1.0, high=1.0)
    out = x if in_place else allocate(rng, dt, rows, hidden, misalign=out_off, stride=out_stride, poison=True)
    try:
        x_before, w_before = x.host.copy(), w.host.copy()
        rms_norm(out.ptr, x.ptr, w.ptr, epsilon, rows, hidden, dtype=dt, input_stride=x.stride,
                 out_stride=out.stride, gemma=gemma, round_once=round_once, stream=stream)
        driver.synchronize()
        p = plan.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
        expected_rows = reference.rms_norm_twin(x.values(), w.values()[0], epsilon, block=p.block,
                                                row_phases=phases(x), gemma=gemma, round_once=round_once)
        expected = out.host.copy() if not in_place else x_before.copy()
        for r in range(rows):
            expected[out.index(r)] = expected_rows[r]
        got = out.download()
        mismatch = np.flatnonzero(bits(got) != bits(expected))
        if mismatch.size:
            raise AssertionError(
                f"{dt.name} rows={rows} hidden={hidden} offsets={in_off},{w_off},{out_off} strides={x.stride},{out.stride}: "
                f"{mismatch.size} elements differ, first at allocation index {mismatch[:5]} "
                f"(rows start at {out.offset}, stride {out.stride}): got {got[mismatch[:5]]}, want {expected[mismatch[:5]]}")
        if not in_place and not np.array_equal(bits(x.download()), bits(x_before)):
            raise AssertionError("input was modified")
        if not np.array_equal(bits(w.download()), bits(w_before)):
            raise AssertionError("weight was modified")
    finally:
        for operand in {id(o): o for o in (x, w, out)}.values():
            operand.close()
