"""Device memory for one (op, dtype, shape): the rotation sets, the weight, and what validation needs.

Each [tokens, hidden] array of the op gets one pool holding ``sets`` copies, each starting on a
256-byte boundary; call i uses set i mod sets, so that consecutive calls together touch more than
twice the L2 and find nothing of their inputs there. Inputs are random (never zeros: they can run
faster and hide unwritten outputs), outputs are poisoned with 0xFF bytes (NaN in every dtype)
before each validation. Pools are tiled from one random block by device-to-device doubling, so a
multi-gigabyte fill costs no host time.
"""
from __future__ import annotations

import numpy as np

from .. import driver, dtypes
from ..tensor import Tensor
from . import stats
from .config import Shape
from .ops import Bench

RANDOM_BLOCK_ELEMENTS = 1 << 22
POISON = 0xFF


def fill_random(ptr: int, nbytes: int, dt: dtypes.DType, rng, low: float = -2.0, high: float = 2.0) -> None:
    """Random values in [low, high) over ``nbytes`` at ``ptr``: one host block, then doubled on the device."""
    count = min(nbytes // dt.itemsize, RANDOM_BLOCK_ELEMENTS)
    block = rng.uniform(low, high, count).astype(np.float32).astype(dt.numpy)
    driver.memcpy_htod(ptr, block)
    filled = block.nbytes
    while filled < nbytes:
        step = min(filled, nbytes - filled)
        driver.memcpy_dtod(ptr + filled, ptr, step)
        filled += step


class Problem:
    def __init__(self, op: Bench, dtype: str, shape: Shape, *, device: driver.Device, rng, cap_bytes: int,
                 l2_factor: float = 2.0, sets: int | None = None):
        self.op = op
        self.dt = dtypes.get(dtype)
        self.tokens, self.hidden = shape.tokens, shape.hidden
        self.device = device
        self.row_bytes = self.tokens * self.hidden * self.dt.itemsize   # one [tokens, hidden] array
        self.stride = stats.pad(self.row_bytes)                         # bytes between sets
        self.vector_stride = stats.pad(self.hidden * 4)                 # room for an fp32 dγ as well
        set_bytes = len(op.arrays) * self.stride + len(op.vector_outputs) * self.vector_stride
        # ``sets`` given: exactly that many (the after-GEMM graphs: one per GEMM -> norm pair), whatever the L2
        self.sets = sets or stats.rotation_sets(set_bytes, device.l2_cache_bytes, cap_bytes, l2_factor)
        self._buffers: list[driver.DeviceBuffer] = []
        self._tensors: dict = {}
        self._torch: dict = {}
        try:
            self.pools = {name: self._alloc(self.sets * self.stride) for name in op.arrays}
            self.vector_pools = {name: self._alloc(self.sets * self.vector_stride) for name in op.vector_outputs}
            self.weight = self._alloc(stats.pad(self.hidden * self.dt.itemsize))
            for name in op.inputs + op.inplace:
                fill_random(self.pools[name].ptr, self.sets * self.stride, self.dt, rng)
            fill_random(self.weight.ptr, self.weight.nbytes, self.dt, rng, -1.0, 1.0)
            for name in op.outputs:
                driver.memset_d8(self.pools[name].ptr, POISON, self.pools[name].nbytes)
            for buffer in self.vector_pools.values():
                driver.memset_d8(buffer.ptr, POISON, buffer.nbytes)
            self._backups = {}
            for name in op.inplace:  # in-place ops overwrite set 0: keep it to restore before each validation
                self._backups[name] = self._alloc(self.row_bytes)
                driver.memcpy_dtod(self._backups[name].ptr, self.ptr(name, 0), self.row_bytes)
            self.rows = stats.sample_rows(self.tokens, self.hidden)
            self.host = {name: self.download_rows(self.ptr(name, 0)) for name in op.inputs + op.inplace}
            self.host_weight = self.download_vector(self.weight.ptr, self.hidden)
        except BaseException:
            self.close()
            raise

    def _alloc(self, nbytes: int) -> driver.DeviceBuffer:
        buffer = driver.DeviceBuffer(nbytes, self.device)
        self._buffers.append(buffer)
        return buffer

    @property
    def allocated_bytes(self) -> int:
        return sum(b.nbytes for b in self._buffers)

    # -- addresses and views --------------------------------------------------------------------

    def ptr(self, name: str, i: int) -> int:
        """Device address of array ``name`` (or vector output) in rotation set ``i``."""
        if name in self.pools:
            return self.pools[name].ptr + i * self.stride
        return self.vector_pools[name].ptr + i * self.vector_stride

    def ptrs(self, name: str) -> list[int]:
        return [self.ptr(name, i) for i in range(self.sets)]

    def tensors(self, name: str) -> list[Tensor]:
        """pyrms Tensors of array ``name`` in every set ([tokens, hidden], or [hidden] for vectors)."""
        if name not in self._tensors:
            vector = name in self.vector_pools
            shape = (self.hidden,) if vector else (self.tokens, self.hidden)
            owner = self.vector_pools[name] if vector else self.pools[name]
            self._tensors[name] = [Tensor(self.ptr(name, i), shape, self.dt, device=self.device.ordinal, owner=owner)
                                   for i in range(self.sets)]
        return self._tensors[name]

    def weight_tensor(self) -> Tensor:
        return Tensor(self.weight.ptr, (self.hidden,), self.dt, device=self.device.ordinal, owner=self.weight)

    def _torch_flat(self, torch, ptr: int, count: int, owner):
        """A PyTorch tensor over ``count`` elements at ``ptr`` (no copy), through DLPack."""
        flat = torch.from_dlpack(Tensor(ptr, (count,), self.dt, device=self.device.ordinal, owner=owner))
        if not flat.is_cuda or flat.data_ptr() != ptr:
            raise RuntimeError(f"torch.from_dlpack did not wrap device memory at {ptr:#x} in place")
        return flat

    def torch_rows(self, torch, name: str) -> list:
        """PyTorch views of array ``name`` in every set, [tokens, hidden] each."""
        if name not in self._torch:
            pool = self.pools[name]
            per_set = self.stride // self.dt.itemsize
            flat = self._torch_flat(torch, pool.ptr, self.sets * per_set, pool).view(self.sets, per_set)
            n = self.tokens * self.hidden
            self._torch[name] = [flat[i, :n].view(self.tokens, self.hidden) for i in range(self.sets)]
        return self._torch[name]

    def torch_weight(self, torch):
        if "weight" not in self._torch:
            self._torch["weight"] = self._torch_flat(torch, self.weight.ptr, self.hidden, self.weight)
        return self._torch["weight"]

    # -- validation support ---------------------------------------------------------------------

    def reset_set0(self) -> None:
        """Set 0 as it was at the start: in-place arrays restored, outputs poisoned."""
        for name, backup in self._backups.items():
            driver.memcpy_dtod(self.ptr(name, 0), backup.ptr, self.row_bytes)
        for name in self.op.outputs:
            driver.memset_d8(self.ptr(name, 0), POISON, self.row_bytes)
        for name in self.op.vector_outputs:
            driver.memset_d8(self.ptr(name, 0), POISON, self.vector_stride)

    def download_rows(self, ptr: int, rows=None) -> np.ndarray:
        """Rows (default: the validation sample) of a contiguous [tokens, hidden] array at ``ptr``."""
        rows = self.rows if rows is None else rows
        out = np.empty((len(rows), self.hidden), self.dt.numpy)
        row_bytes = self.hidden * self.dt.itemsize
        at = 0
        for first, count in stats.contiguous_runs(rows):
            driver.memcpy_dtoh(out[at:at + count], ptr + first * row_bytes)
            at += count
        return out

    def download_vector(self, ptr: int, count: int, dtype=None) -> np.ndarray:
        out = np.empty(count, (self.dt if dtype is None else dtypes.get(dtype)).numpy)
        driver.memcpy_dtoh(out, ptr)
        return out

    def close(self) -> None:
        self._torch.clear()
        self._tensors.clear()
        for buffer in self._buffers:
            buffer.close()
        self._buffers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
