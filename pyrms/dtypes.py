"""The storage dtypes pyrms kernels accept, and how each is named in numpy and in CUDA C++."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str          # canonical name, used in kernel keys and messages
    numpy: np.dtype    # host representation (bfloat16 through ml_dtypes)
    ctype: str         # CUDA C++ type spelled in name expressions
    itemsize: int

    @property
    def vec_elems(self) -> int:
        """Elements in one 16-byte vector."""
        return 16 // self.itemsize


BFLOAT16 = DType("bfloat16", np.dtype(ml_dtypes.bfloat16), "__nv_bfloat16", 2)
FLOAT16 = DType("float16", np.dtype(np.float16), "__half", 2)
FLOAT32 = DType("float32", np.dtype(np.float32), "float", 4)

ALL = (BFLOAT16, FLOAT16, FLOAT32)
# Every name get() accepts (case-insensitive), the canonical ones included. "float" is C's float.
ALIASES = {
    "bfloat16": BFLOAT16, "bf16": BFLOAT16,
    "float16": FLOAT16, "fp16": FLOAT16, "half": FLOAT16,
    "float32": FLOAT32, "fp32": FLOAT32, "float": FLOAT32,
}


def allowed() -> str:
    """What get() accepts, for error messages: 'bfloat16, float16, float32 (aliases: ...)'."""
    aliases = ", ".join(name for name, d in ALIASES.items() if name != d.name)
    return (f"{', '.join(d.name for d in ALL)} (aliases: {aliases}; or the numpy dtypes float16, float32 "
            f"and ml_dtypes.bfloat16)")


def get(dtype) -> DType:
    """Resolve a name or alias ('bfloat16', 'bf16', 'fp16', 'half', 'fp32', 'float', ...), a numpy dtype
    or scalar type (np.float16, ml_dtypes.bfloat16) or a DType; ValueError/TypeError listing what is
    allowed otherwise."""
    if isinstance(dtype, DType):
        return dtype
    if type(dtype).__module__ == "torch":  # torch.bfloat16 etc., named without importing torch
        dtype = str(dtype).removeprefix("torch.")
    if isinstance(dtype, str):
        found = ALIASES.get(dtype.strip().lower())
        if found is not None:
            return found
        try:  # numpy's own spellings: 'f2', '<f4', 'e'
            np_dtype = np.dtype(dtype.strip())
        except (TypeError, ValueError):
            np_dtype = None
        found = next((d for d in ALL if d.numpy == np_dtype), None)
        if found is None:
            raise ValueError(f"dtype {dtype!r} is not supported; allowed: {allowed()}")
        return found
    if dtype is None:  # np.dtype(None) is float64, which would make the message below misleading
        raise TypeError(f"dtype must be a string, numpy dtype or pyrms DType, got None; allowed: {allowed()}")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a string, numpy dtype or pyrms DType, got {dtype!r}") from None
    for d in ALL:
        if d.numpy == np_dtype:
            return d
    raise ValueError(f"dtype {np_dtype} is not supported; allowed: {allowed()}")


def argument(text: str) -> DType:
    """get() as an argparse ``type=``: a bad name becomes a usage error that lists what is allowed."""
    import argparse

    try:
        return get(text)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def argument_list(text: str) -> tuple[DType, ...]:
    """A comma list of dtypes for argparse (``--dtypes bf16,fp16``), duplicates dropped, order kept."""
    return tuple(dict.fromkeys(argument(item) for item in text.split(",") if item.strip()))


def from_typestr(typestr: str) -> DType:
    """Resolve a ``__cuda_array_interface__`` typestr that names a float type ('<f2', '<f4').

    bfloat16 has no typestr of its own: producers export it as raw 2-byte storage, which only an
    explicit dtype can interpret (pyrms.tensor handles that case).
    """
    if typestr in ("<f2", "|f2"):
        return FLOAT16
    if typestr in ("<f4", "|f4"):
        return FLOAT32
    raise ValueError(
        f"array typestr {typestr!r} is not supported; allowed: '<f2' (float16), '<f4' (float32), or "
        f"2-byte storage ('<i2', '<u2', '<V2') with dtype='bfloat16'"
    )


# --- quantized output dtypes -----------------------------------------------------------------------
# Output-only: get() does not resolve them, so no existing op accepts one as its storage dtype.


@dataclass(frozen=True)
class QuantDType:
    """An 8-bit output dtype of a quantizing norm: its value range and the floor of a dynamic scale."""
    name: str          # canonical name, as torch spells it
    numpy: np.dtype    # host representation (the float8 types through ml_dtypes)
    ctype: str         # CUDA C++ type of one element
    qmax: np.float32   # largest finite magnitude; outputs saturate to it
    qmin: np.float32   # most negative output: -qmax for fp8, -128 for int8 (cvt.rni.sat.s8.f32's range)
    min_scale: np.float32  # floor of a per-token/per-group scale (vLLM's min_scaling_factor, utils.cuh)

    @property
    def integer(self) -> bool:
        """int8: rounded to an integer and saturated by the conversion itself; fp8 types are not."""
        return self.numpy.kind == "i"

    @property
    def itemsize(self) -> int:
        """1: every quantized dtype is one byte, so arrays of them share the other dtypes' stride arithmetic."""
        return self.numpy.itemsize


def _fp8(name: str, numpy_type, ctype: str) -> QuantDType:
    qmax = np.float32(ml_dtypes.finfo(numpy_type).max)
    # 1.0f / (qmax * 512.0f), two fp32 operations as in vLLM (the product is exact).
    return QuantDType(name, np.dtype(numpy_type), ctype, qmax, -qmax, np.float32(1.0) / (qmax * np.float32(512.0)))


FLOAT8_E4M3FN = _fp8("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "__nv_fp8_e4m3")
FLOAT8_E5M2 = _fp8("float8_e5m2", ml_dtypes.float8_e5m2, "__nv_fp8_e5m2")
# vLLM's min_scaling_factor<int8_t> is FLT_EPSILON, not 1/(127 * 512).
# ctype "signed char": NVRTC defines no int8_t without <cstdint>, which it cannot always find.
INT8 = QuantDType("int8", np.dtype(np.int8), "signed char", np.float32(127.0), np.float32(-128.0),
                  np.float32(np.finfo(np.float32).eps))

QUANTIZED = (FLOAT8_E4M3FN, FLOAT8_E5M2, INT8)

# A dtype argument: a name or alias, a numpy dtype or scalar type, a DType, or a QuantDType for a quantized output.
DTypeLike = Union[str, DType, QuantDType, np.dtype, type]


def quantized(dtype) -> QuantDType:
    """Resolve a quantized output dtype: a QuantDType, its name ('float8_e4m3fn', 'float8_e5m2', 'int8'),
    its numpy dtype (ml_dtypes.float8_e4m3fn, np.int8) or its torch dtype (torch.float8_e4m3fn, torch.int8);
    ValueError naming what is allowed otherwise."""
    if isinstance(dtype, QuantDType):
        return dtype
    if type(dtype).__module__ == "torch":  # named without importing torch, as get() does
        dtype = str(dtype).removeprefix("torch.")
    if isinstance(dtype, str):
        found = next((q for q in QUANTIZED if q.name == dtype.strip().lower()), None)
    else:
        try:
            np_dtype = np.dtype(dtype) if dtype is not None else None
        except TypeError:
            np_dtype = None
        found = next((q for q in QUANTIZED if q.numpy == np_dtype), None)
    if found is None:
        raise ValueError(f"quantized output dtype {dtype!r} is not supported; allowed: "
                         f"{', '.join(q.name for q in QUANTIZED)}")
    return found


# CAI typestr kinds (after the byte-order character) of 1-byte storage that names no quantized dtype:
# raw bytes, and what ml_dtypes' dtype.str gives its float8 types ('<V1' for float8_e4m3fn and most others,
# '<f1' for float8_e5m2), which cannot tell one float8 format from another.
RAW_1BYTE = ("u1", "V1", "f1")


def quantized_from_typestr(typestr: str) -> QuantDType | None:
    """The quantized dtype a ``__cuda_array_interface__`` typestr names: '|i1' is int8; 1-byte storage
    (RAW_1BYTE: '|u1', '<V1', '<f1') names none, so None (the caller's out_dtype says what it holds);
    ValueError for any other typestr, listing what is allowed."""
    if typestr[1:] == "i1":  # one byte: its byte-order character ('|', '<', '>') says nothing
        return INT8
    if typestr[1:] in RAW_1BYTE:
        return None
    raise ValueError(f"array typestr {typestr!r} is not a quantized output type; allowed: '|i1' (int8), or 1-byte "
                     f"storage ('|u1', '<V1', '<f1') with out_dtype naming what it holds")
