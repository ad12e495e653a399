"""``pyrms.rms_norm``: RMSNorm forward on device pointers or arrays (kernel: cuda_src/rms_norm.cu)."""
from __future__ import annotations

from .. import driver, dtypes, errors, kernels
from .. import plan as planner
from . import _operands as check
from .._types import DTypeLike, Operand, StreamLike

_SIGNATURE = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
_NAMES = ("out", "input", "weight")
_DEFAULT_DTYPE = dtypes.BFLOAT16
_FEW_ROWS = planner.FEW_ROWS
_launch_configs: dict[tuple, tuple] = {}


def launch_config(device, dt, hidden: int, gemma: bool, round_once: bool):
    """(kernel for many rows, kernel for few rows, threads per block) for one (device, dtype,
    hidden, options), cached. The two kernels compute the same bits; see plan.FEW_ROWS."""
    key = (device.ordinal, dt, hidden, gemma, round_once)
    config = _launch_configs.get(key)
    if config is None:
        p = planner.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
        config = _launch_configs[key] = (kernels.get(p.source, p.expression, p.group, _SIGNATURE, device),
                                         kernels.get(p.source, p.latency_expression, p.group, _SIGNATURE, device),
                                         p.block)
    return config


def rms_norm(out: Operand, input: Operand, weight: Operand, epsilon: float, num_tokens: int, hidden_size: int, *,
             dtype: DTypeLike | None = None, input_stride: int | None = None, out_stride: int | None = None,
             stream: StreamLike = None, gemma: bool = False, round_once: bool = False) -> None:
    """RMSNorm of each of ``num_tokens`` rows of ``hidden_size`` elements, written to ``out``.

    ``out[r] = x[r] / sqrt(mean(x[r]^2) + epsilon) * weight``, accumulated in fp32. By default the
    normalized value is rounded to the storage dtype before the weight multiplies it (the seed's and
    Hugging Face LLaMA's rounding); ``round_once=True`` rounds only the final product (PyTorch's
    fused kernel, current vLLM). ``gemma=True`` multiplies by ``1 + weight`` (the addition in fp32).

    ``out``, ``input``, ``weight``: raw device pointers (int), pyrms Tensors, or objects exposing
    ``__cuda_array_interface__``; arrays must be [num_tokens, hidden_size] (weight [hidden_size]) and
    contiguous along the hidden dimension. Any element alignment of any pointer is allowed.
    ``out`` may be ``input`` (in place). ``dtype``: 'bfloat16', 'float16' or 'float32'; by default
    the arrays' dtype, or bfloat16 for raw pointers. ``input_stride``/``out_stride``: elements between
    rows (>= hidden_size; default: the array's, or hidden_size). ``stream``: a pyrms Stream, a raw
    CUstream handle, an object with ``.cuda_stream`` (torch.cuda.Stream), or None for the legacy
    default stream. With epsilon = 0 an all-zero row gives 0/0 = NaN, as in PyTorch.

    Everything is validated before the launch; bad arguments raise TypeError or ValueError naming
    the argument. The launch is asynchronous on ``stream``.
    """
    if (type(out) is int and type(input) is int and type(weight) is int and type(num_tokens) is int
            and type(epsilon) is float and (stream is None or (type(stream) is int and 0 <= stream < 2**64))):
        try:
            fast = _fast_config(dtype, hidden_size, input_stride, out_stride, gemma, round_once)
        except errors.NoDriverError:  # validate first, then report the missing driver
            fast = None
        if fast is not None and _launch_raw(fast, out, input, weight, epsilon, num_tokens, stream):
            return
    # The general path: arrays, or anything the fast path declined, which is then either valid
    # after all or raises here with the message that names the bad argument.
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    eps = check.epsilon(epsilon)
    if type(out) is int and type(input) is int and type(weight) is int:
        dt = _DEFAULT_DTYPE if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
        check.raw_pointers(_NAMES, (out, input, weight), dt)
        check.extent("input", num_tokens, x_stride, hidden)
        check.extent("out", num_tokens, o_stride, hidden)
        o, x, w = check.Operand("out", out), check.Operand("input", input), check.Operand("weight", weight)
    else:
        hint = None if dtype is None else dtypes.get(dtype)
        o = check.operand("out", out, hint)
        x = check.operand("input", input, hint)
        w = check.operand("weight", weight, hint)
        dt = check.resolve_dtype(dtype, [o, x, w])
        x_stride = check.row_stride(x, input_stride, "input_stride", num_tokens, hidden)
        o_stride = check.row_stride(o, out_stride, "out_stride", num_tokens, hidden)
        check.vector(w, hidden)
        check.aligned([o, x, w], dt)
    o_span = check.span(o.ptr, num_tokens, o_stride, hidden, dt.itemsize)
    x_span = check.span(x.ptr, num_tokens, x_stride, hidden, dt.itemsize)
    check.no_partial_overlap(o, o_span, x, x_span, may_alias=True)
    check.no_partial_overlap(o, o_span, w, check.span(w.ptr, 1, hidden, hidden, dt.itemsize), may_alias=False)
    handle = driver.stream_handle(stream)
    device = driver.selected_device()
    check.same_device([o, x, w], device.ordinal)
    many, few, block = launch_config(device, dt, hidden, bool(gemma), bool(round_once))
    kernel = few if num_tokens <= _FEW_ROWS else many
    kernel.launch(num_tokens, block, (o.ptr, x.ptr, w.ptr, eps, hidden, x_stride, o_stride), handle)


# The raw-pointer fast path. The arguments that do not change from call to call in a model
# (dtype, sizes, strides, options) are validated once per device and remembered; each call then
# checks only pointers, row count, epsilon, extents and overlaps, inline. Anything unusual is
# declined (None / False) and handled by the general path above.
_fast_configs: dict[tuple, tuple | None] = {}
_FAST_CONFIGS_MAX = 4096


def _fast_config(dtype, hidden, input_stride, out_stride, gemma, round_once):
    device = driver.selected_device()
    key = (device, dtype, hidden, input_stride, out_stride, gemma, round_once)
    try:
        return _fast_configs[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable argument: the general path will say what is wrong with it
        return None
    try:
        hidden = check.size("hidden_size", hidden)
        dt = _DEFAULT_DTYPE if dtype is None else dtypes.get(dtype)
        x_stride = check.stride_arg("input_stride", input_stride, hidden)
        o_stride = check.stride_arg("out_stride", out_stride, hidden)
    except (TypeError, ValueError):
        return None
    many, few, block = launch_config(device, dt, hidden, bool(gemma), bool(round_once))
    # Rows past this count could reach 2^59 elements (check.extent); the general path says so.
    max_rows = (check.INT64_MAX // 16 - hidden) // max(x_stride, o_stride) + 1
    if len(_fast_configs) >= _FAST_CONFIGS_MAX:  # bounded, whatever shapes a server meets
        _fast_configs.clear()
    config = _fast_configs[key] = (many, few, block, dt.itemsize, hidden, x_stride, o_stride,
                                   min(max_rows, check.INT32_MAX))
    return config


def _launch_raw(config, out, input, weight, epsilon, num_tokens, stream) -> bool:
    many, few, block, itemsize, hidden, x_stride, o_stride, max_rows = config
    if not (0 < num_tokens <= max_rows and 0.0 <= epsilon <= check.FLOAT32_MAX):  # NaN fails both
        return False
    if out <= 0 or input <= 0 or weight <= 0 or (out | input | weight) % itemsize:
        return False
    o_end = out + ((num_tokens - 1) * o_stride + hidden) * itemsize
    x_end = input + ((num_tokens - 1) * x_stride + hidden) * itemsize
    if out < x_end and input < o_end and not (out == input and o_stride == x_stride):
        return False
    if out < weight + hidden * itemsize and weight < o_end:
        return False
    (few if num_tokens <= _FEW_ROWS else many).launch(
        num_tokens, block, (out, input, weight, epsilon, hidden, x_stride, o_stride), 0 if stream is None else stream)
    return True
