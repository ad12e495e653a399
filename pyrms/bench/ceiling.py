"""The copy ceiling: device-to-device copy bandwidth, bytes read plus bytes written, measured like
the kernels (events around a batch of copies behind the spin kernel)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import driver
from . import stats, timing

MIB = 1 << 20


@dataclass
class Ceiling:
    copy_bytes: int      # bytes of one copy (it moves twice that: read + write)
    samples_us: list     # per copy
    label: str = ""

    @property
    def summary(self) -> stats.Summary:
        return stats.summarize([self.samples_us])

    @property
    def gbps(self) -> float:
        return stats.gbps(2 * self.copy_bytes, self.summary.median)

    def to_dict(self) -> dict:
        s = self.summary
        return {"label": self.label, "copy_bytes": self.copy_bytes, "bytes_moved_per_copy": 2 * self.copy_bytes,
                "median_us": s.median, "p10_us": s.p10, "p90_us": s.p90, "gbps": self.gbps,
                "samples_us": self.samples_us}


def measure(timer: timing.EventTimer, device: driver.Device, mib: int, reps: int, label: str) -> Ceiling:
    """cuMemcpyDtoDAsync of ``mib`` MiB (far beyond L2) between two buffers, ``reps`` samples of 4 copies."""
    nbytes = mib * MIB
    with driver.DeviceBuffer(nbytes, device) as src, driver.DeviceBuffer(nbytes, device) as dst:
        driver.memset_d8(src.ptr, 0x5A, nbytes)
        stream = timer.stream

        def copy(_i):
            driver.memcpy_dtod(dst.ptr, src.ptr, nbytes, stream)

        host_us = timer.warm_up(copy, 1, 2)
        state = timing.Cursor(sets=1, batch=4, spin_us=timing.initial_spin_us(host_us, 4))
        samples = timer.samples(copy, state, reps)
    return Ceiling(nbytes, samples, label)
