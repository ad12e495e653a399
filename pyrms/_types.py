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

from .driver import CudaStreamProtocol, DeviceBuffer, HasCudaStream, StreamLike
from .dtypes import DTypeLike
from .tensor import CudaArray, Tensor

# Defined beside what reads them (a layer below this module), named here with the rest.
__all__ = ["Array", "ArrayT", "CudaArray", "CudaStreamProtocol", "DLPackArray", "DTypeLike", "HasCudaStream",
           "Operand", "OperandT", "OptionalOperand", "Rows", "StreamLike", "Strides", "Workspace"]


class DLPackArray(Protocol):
    """Anything exporting DLPack: ``__dlpack__()`` and ``__dlpack_device__()`` (its device, read first)."""

    def __dlpack_device__(self) -> Any: ...


Array = Union[Tensor, CudaArray, DLPackArray]
Operand = Union[int, Array]
OptionalOperand = Optional[Operand]
ArrayT = TypeVar("ArrayT", bound=Array)
OperandT = TypeVar("OperandT", bound=Operand)
Rows = Union[int, tuple[int, ...]]
Strides = Union[int, tuple[int, ...]]
Workspace = Union[int, DeviceBuffer, CudaArray]
