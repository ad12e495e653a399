"""Type aliases for the public API's annotations (hints only: the ops validate at run time).

- ``Array``: a ``pyrms.Tensor``, or any object exposing ``__cuda_array_interface__`` (PyTorch, CuPy, Numba)
  or DLPack (``__dlpack__``, ``__dlpack_device__``).
- ``Operand``: an ``Array`` or a raw device pointer (int).
- ``ArrayT``, ``OperandT``: the type of an ``out`` given, which the ops return as it was given.
- ``Rows``, ``Strides``: ``num_tokens`` and the row strides, an int or, for raw pointers in N-D form, a tuple
  of one per leading dimension.
- ``StreamLike``: a ``pyrms.Stream``, a raw CUstream handle (int), an object with an int
  ``.cuda_stream`` (``torch.cuda.Stream``) or ``__cuda_stream__()`` (cuda.core, cuda.bindings'
  CUstream), or None for the legacy default stream.
- ``Workspace``: the backward's ``workspace=``: a pointer, a ``pyrms.DeviceBuffer`` or an array.
- ``DTypeLike``: a name or alias ('bfloat16', 'bf16', 'fp16', ...), a numpy dtype or scalar type
  (``np.float16``, ``ml_dtypes.bfloat16``) or a ``pyrms.dtypes.DType`` (``QuantDType`` for a quantized output).
"""
from __future__ import annotations

from typing import Any, Optional, Protocol, TypeVar, Union

import numpy as np

from .driver import DeviceBuffer, Stream
from .dtypes import DType, QuantDType
from .tensor import Tensor


class CudaArray(Protocol):
    """Anything exporting ``__cuda_array_interface__`` (version 3)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


class DLPackArray(Protocol):
    """Anything exporting DLPack: ``__dlpack__()`` and ``__dlpack_device__()`` (its device, read first)."""

    def __dlpack_device__(self) -> Any: ...


class HasCudaStream(Protocol):
    """torch.cuda.Stream and the like: the raw handle as ``.cuda_stream``."""

    @property
    def cuda_stream(self) -> int: ...


class CudaStreamProtocol(Protocol):
    """cuda.core's stream protocol: ``__cuda_stream__()`` returns (version, handle)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...


Array = Union[Tensor, CudaArray, DLPackArray]
Operand = Union[int, Array]
OptionalOperand = Optional[Operand]
ArrayT = TypeVar("ArrayT", bound=Array)
OperandT = TypeVar("OperandT", bound=Operand)
Rows = Union[int, tuple[int, ...]]
Strides = Union[int, tuple[int, ...]]
Workspace = Union[int, DeviceBuffer, CudaArray]
StreamLike = Union[None, int, Stream, HasCudaStream, CudaStreamProtocol]
DTypeLike = Union[str, DType, QuantDType, np.dtype, type]
