"""Calls of the public API as users write them, for ``mypy --strict`` (tests/test_typing.py): each form's
result has the type named in its assert_type. Never run: mypy only reads it."""
from __future__ import annotations

from typing_extensions import assert_type

import numpy as np

import pyrms

x = pyrms.Tensor.empty((4, 64), "bfloat16")
w = pyrms.Tensor.empty((64,), "bfloat16")
y = pyrms.Tensor.empty((4, 64), "bfloat16")

# rms_norm, input first: a new pyrms.Tensor, or the out given
assert_type(pyrms.rms_norm(x, w), pyrms.Tensor)
assert_type(pyrms.rms_norm(x, None, 1e-5), pyrms.Tensor)
assert_type(pyrms.rms_norm(x, w, eps=1e-5, out=y), pyrms.Tensor)
assert_type(pyrms.rms_norm(input=x, weight=w, eps=1e-5), pyrms.Tensor)
assert_type(pyrms.rms_norm(x, w).to_numpy(), np.ndarray)
# out first: out as given (a raw pointer stays an int), a new pyrms.Tensor for out=None
assert_type(pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-5, 4, 64, dtype="bfloat16"), int)
assert_type(pyrms.rms_norm(y, x, w, 1e-5), pyrms.Tensor)
assert_type(pyrms.rms_norm(None, x, w, 1e-5), pyrms.Tensor)
assert_type(pyrms.rms_norm(y.ptr, x.ptr, None, 1e-5, (2, 2), 64, input_stride=(128, 64)), int)

# layer_norm, both conventions
assert_type(pyrms.layer_norm(x, w), pyrms.Tensor)
assert_type(pyrms.layer_norm(x, w, w, 1e-5, out=y), pyrms.Tensor)
assert_type(pyrms.layer_norm(x, w, bias=w, eps=1e-5), pyrms.Tensor)
assert_type(pyrms.layer_norm(y, x, w, None, 1e-5), pyrms.Tensor)
assert_type(pyrms.layer_norm(y.ptr, x.ptr, w.ptr, None, 1e-5, 4, 64), int)

# Calls of neither convention are type errors (strict's warn_unused_ignores fails the run where one is not)
pyrms.rms_norm(x.ptr, w.ptr)  # type: ignore[call-overload]  # raw pointers input first
pyrms.rms_norm(x, w, eps=1e-5, epsilon=1e-5)  # type: ignore[call-overload]  # both epsilons
pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-5, 4, 64, out=y)  # type: ignore[call-overload]  # out given twice
