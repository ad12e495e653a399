"""``pyrms.rms_norm``: RMSNorm forward on device pointers or arrays (kernel: cuda_src/rms_norm.cu)."""
from __future__ import annotations

from .. import driver, dtypes, kernels
from .. import plan as planner
from . import _operands as check

_SIGNATURE = ("ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")
_NAMES = ("out", "input", "weight")
_DEFAULT_DTYPE = dtypes.BFLOAT16
_launch_configs: dict[tuple, tuple] = {}


def launch_config(device, dt, hidden: int, gemma: bool, round_once: bool):
    """(kernel, threads per block) for one (device, dtype, hidden, options), cached."""
    key = (device.ordinal, dt, hidden, gemma, round_once)
    config = _launch_configs.get(key)
    if config is None:
        p = planner.plan_rms_norm(dt, hidden, gemma=gemma, round_once=round_once)
        kernel = kernels.get(p.source, p.expression, p.group, _SIGNATURE, device)
        config = _launch_configs[key] = (kernel, p.block)
    return config


def rms_norm(out, input, weight, epsilon, num_tokens, hidden_size, *, dtype=None, input_stride=None,
             out_stride=None, stream=None, gemma=False, round_once=False):
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
    num_tokens = check.size("num_tokens", num_tokens)
    hidden = check.size("hidden_size", hidden_size)
    eps = check.epsilon(epsilon)
    if type(out) is int and type(input) is int and type(weight) is int:
        # Raw pointers, the hot path: nothing to infer, so only the checks that apply to them.
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
    kernel, block = launch_config(device, dt, hidden, bool(gemma), bool(round_once))
    kernel.launch(num_tokens, block, (o.ptr, x.ptr, w.ptr, eps, hidden, x_stride, o_stride), handle)
