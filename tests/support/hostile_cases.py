"""Hostile inputs across pyrms's public API: each one, the exception it must raise and its message.

One list, two users: tests/test_hostile_inputs.py runs every case as a test, and tools/hostile_table.py
runs them all and writes docs/hostile_inputs.md.

Every case runs with a launch sentinel armed: ``pyrms.driver.launch_kernel`` (the only way to
``cuLaunchKernel``) is replaced by a function that counts the attempt and raises LaunchAttempted, so
an input that gets past validation fails its case on any machine, with or without a GPU, instead of
launching on made-up pointers. A case needs one of three environments:

- "nothing": the machine as it is. These inputs are refused before the driver is touched, so on a
  machine without a driver they raise their error, not NoDriverError.
- "device": a device. On the CPU a fake_driver.FakeDriver stands in (one sm_90 device with 64 MiB, host memory as
  device memory; nothing is compiled: pyrms.launch.get_kernel hands out kernels whose launches hit the
  sentinel); ``run_case(real_device=True)`` uses the real driver instead (tests marked gpu).
- "no-driver": a cuda.bindings whose every call fails as it does where libcuda is missing.

A case with ``bug`` set shows a defect: ``exc``/``message`` say what pyrms should raise, ``actual``
what it raises today; its test is an expected failure until the defect is fixed.
"""
from __future__ import annotations

import contextlib
import io
import math
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from cuda.bindings import driver as real_cu

import pyrms
from pyrms import compiler, driver, errors, headers, launch
from pyrms.tensor import Tensor
from tests.support.fake_driver import FakeDriver, fresh_driver_state

A, B, W = 1 << 20, 2 << 20, 3 << 20  # made-up, 16-byte aligned device addresses: never dereferenced
G = 4 << 20  # another made-up address, far from the others (gradients, biases)


class LaunchAttempted(Exception):
    """A hostile input got as far as cuLaunchKernel."""


class CliExit(Exception):
    """A command line's main() ended: its exit status and the last line it wrote to stderr."""

    def __init__(self, code, stderr: str):
        self.code = code
        lines = stderr.strip().splitlines()
        super().__init__(f"exit status {code}: {lines[-1] if lines else ''}")


# --- stand-ins for the driver ---------------------------------------------------------------------


class MissingDriver:
    """cuda.bindings where libcuda cannot be loaded: every driver call raises, as the real one does."""

    cuuint64_t = real_cu.cuuint64_t  # a value type, not a call

    def __getattr__(self, name):
        if name.startswith("cu"):
            def missing(*args, **kwargs):
                raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search '
                                   "(simulated: libcuda.so.1 not found)")
            return missing
        return getattr(real_cu, name)


class _Saved:
    """Module attributes replaced for a while and put back, whatever happens in between."""

    def __init__(self):
        self.saved = []

    def set(self, obj, name, value):
        self.saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def restore(self):
        for obj, name, value in reversed(self.saved):
            setattr(obj, name, value)
        self.saved.clear()


@dataclass
class Outcome:
    raised: str | None  # exception class name, None if the call returned
    message: str
    launches: int  # attempts to reach cuLaunchKernel (must be 0)
    exception: BaseException | None = None


@contextlib.contextmanager
def environment(needs: str, real_device: bool = False):
    """The environment a case needs (see the module docstring), the launch sentinel armed; yields
    the list that collects launch attempts."""
    attempts: list[tuple] = []

    def sentinel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params_address, pdl=False):
        attempts.append((gx, bx, stream))
        raise LaunchAttempted(f"a launch of grid {gx} x block {bx} reached cuLaunchKernel")

    saved = _Saved()
    fake_owned: list[weakref.ref] = []
    try:
        saved.set(driver, "launch_kernel", sentinel)
        if needs == "no-driver":
            fresh_driver_state(saved.set, MissingDriver())
        elif needs == "device" and not real_device:
            fresh_driver_state(saved.set, FakeDriver(free_bytes=64 << 20, total_bytes=80 << 20))
            saved.set(launch, "get_kernel", lambda source, expression, group, signature, device=None:
                      launch.Kernel(0xF00D, expression, signature, None))
            own = driver._Owned._own

            def own_and_track(obj, device, resources):
                own(obj, device, resources)
                fake_owned.append(weakref.ref(obj))

            saved.set(driver._Owned, "_own", own_and_track)
        elif needs not in ("nothing", "device"):
            raise ValueError(f"unknown environment {needs!r}")
        yield attempts
    finally:
        # Streams, events and buffers of the fake device must never be released through the real
        # driver: their finalizers go before the real driver comes back.
        for ref in fake_owned:
            obj = ref()
            if obj is not None:
                obj._finalizer.detach()
                obj._closed = True
        saved.restore()


def run_case(case: "Case", real_device: bool = False) -> Outcome:
    """Run one case in its environment; never raises (the outcome says what happened)."""
    with environment(case.needs, real_device) as attempts:
        try:
            case.call()
        except BaseException as exc:  # noqa: BLE001 - the outcome is the point
            if isinstance(exc, KeyboardInterrupt):
                raise
            return Outcome(type(exc).__name__, str(exc), len(attempts), exc)
        return Outcome(None, "returned without an exception", len(attempts))


# --- helpers for building hostile calls -----------------------------------------------------------


class FakeArray:
    """A minimal __cuda_array_interface__ producer (what PyTorch or CuPy expose); made-up memory."""

    def __init__(self, ptr, shape, typestr="<f2", strides=None, **extra):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, data=(ptr, False), strides=strides,
                                             version=3, **extra)


class RawInterface:
    """An object whose __cuda_array_interface__ is whatever it is given, however malformed."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


class RefusingInterface:
    """An array whose __cuda_array_interface__ raises, as torch's does for a tensor that requires grad."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad. "
                           "If gradients aren't required, use var.detach() to get Variable that doesn't require grad.")


class _TorchDevice:
    def __init__(self, type_, index):
        self.type, self.index = type_, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class TorchLikeTensor:
    """What pyrms reads of a torch tensor (data_ptr(), shape, stride(), dtype, device, requires_grad),
    without torch: CI has none. Its type claims torch's module, as torch.Tensor's does."""

    def __init__(self, ptr, shape, dtype="torch.float16", device=("cuda", 0), requires_grad=False, strides=None):
        self._ptr, self.shape, self._dtype = ptr, shape, dtype
        self._strides = strides or tuple(int(math.prod(shape[i + 1:])) for i in range(len(shape)))
        self.device, self.requires_grad = _TorchDevice(*device), requires_grad

    @property
    def dtype(self):
        return self._dtype

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides


TorchLikeTensor.__module__ = "torch"


def rms(**overrides):
    """pyrms.rms_norm on made-up pointers, 4 rows of 64, with some arguments replaced."""
    args = dict(out=A, input=B, weight=W, epsilon=1e-6, num_tokens=4, hidden_size=64)
    args.update(overrides)
    positional = [args.pop(k) for k in ("out", "input", "weight", "epsilon", "num_tokens", "hidden_size")]
    return pyrms.rms_norm(*positional, **args)


def rms_arrays(**overrides):
    """pyrms.rms_norm on float16 arrays (made-up memory), with some arguments replaced."""
    args = dict(out=FakeArray(A, (4, 64)), input=FakeArray(B, (4, 64)), weight=FakeArray(W, (64,)))
    args.update(overrides)
    return rms(**args)


def backward(**overrides):
    """pyrms.rms_norm_backward on made-up pointers, 4 rows of 64."""
    args = dict(grad_input=A, grad_weight=G, grad_output=B, input=B + 65536, weight=W, epsilon=1e-6,
                num_tokens=4, hidden_size=64)
    args.update(overrides)
    names = ("grad_input", "grad_weight", "grad_output", "input", "weight", "epsilon", "num_tokens", "hidden_size")
    return pyrms.rms_norm_backward(*[args.pop(k) for k in names], **args)


def quant(**overrides):
    """pyrms.rms_norm_quant on made-up pointers, 4 rows of 256 into float8_e4m3fn, per group of 64 (scales at G),
    with some arguments replaced."""
    args = dict(out=A, input=B, weight=W, epsilon=1e-6, num_tokens=4, hidden_size=256, scale=G, mode="per_group",
                group_size=64)
    args.update(overrides)
    positional = [args.pop(k) for k in ("out", "input", "weight", "epsilon", "num_tokens", "hidden_size")]
    return pyrms.rms_norm_quant(*positional, **args)


def closed(obj):
    obj.close()
    return obj


def view_of_freed():
    tensor = Tensor.empty((4, 64), "bfloat16")
    view = tensor.view(0)
    tensor.close()
    rms(input=view)


def cli(main, argv):
    """Run a command line's main(argv) in this process; always raises CliExit with what it ended with."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    raise CliExit(code, err.getvalue())


def bench(*argv):
    from pyrms.bench.cli import main
    return cli(main, list(argv))


def demo(*argv):
    from pyrms.demo import main
    return cli(main, list(argv))


@contextlib.contextmanager
def _no_headers():
    """Nowhere to find CUDA headers: no wheel on sys.path, pathfinder finds nothing, the only toolkit root is empty."""
    empty = Path(tempfile.mkdtemp(prefix="pyrms-no-cuda-"))
    saved = _Saved()
    try:
        saved.set(headers, "_site_dirs", lambda: [])
        saved.set(headers, "_pathfinder_dir", lambda name: None)
        saved.set(headers, "_toolkit_roots", lambda: [str(empty)])
        headers.find.cache_clear()
        compiler._header_fingerprint.cache_clear()
        yield empty
    finally:
        saved.restore()
        headers.find.cache_clear()
        compiler._header_fingerprint.cache_clear()
        shutil.rmtree(empty, ignore_errors=True)


def compile_without_headers():
    with _no_headers():
        compiler.compile_source("rms_norm.cu", arch="sm_90", name_expressions=["pyrms::rms_norm_kernel<float, 0, false, false, false>"])


# --- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    api: str  # the public entry point
    input: str  # what is hostile about the input, in words
    call: Callable[[], object]
    exc: type[BaseException]
    message: str  # a substring of the message
    needs: str = "nothing"  # "nothing", "device" or "no-driver"
    bug: str | None = None  # what is wrong today, where exc/message describe what should happen
    actual: str | None = None  # with bug: the exception raised today and a substring of its message



CASES = [
    # --- pyrms.rms_norm: pointers -------------------------------------------------------------------
    Case("null-out", "pyrms.rms_norm", "out = 0 (null pointer)", lambda: rms(out=0), ValueError,
         "out must be a non-null device pointer, got 0"),
    Case("negative-pointer", "pyrms.rms_norm", "input = -16", lambda: rms(input=-16), ValueError,
         "input must be a non-null device pointer, got -16"),
    Case("none-weight-gemma", "pyrms.rms_norm", "weight = None with gemma=True", lambda: rms(weight=None, gemma=True),
         ValueError, "gemma needs a weight (it multiplies by 1 + weight); got weight=None"),
    Case("none-weight-dtype", "pyrms.rms_norm", "weight = None with weight_dtype='float32'",
         lambda: rms(weight=None, weight_dtype="float32"), ValueError,
         "weight_dtype='float32' was given for weight=None; leave it out"),
    Case("weight-dtype-fp16", "pyrms.rms_norm", "weight_dtype='float16' beside bfloat16 rows",
         lambda: rms(weight_dtype="float16"), ValueError,
         "weight dtype must be bfloat16 (the input's) or float32, got float16"),
    Case("fp32-weight-misaligned", "pyrms.rms_norm", "an fp32 weight 2 bytes past a 4-byte boundary",
         lambda: rms(weight=W + 2, weight_dtype="float32"), ValueError,
         f"weight pointer {W + 2:#x} is not aligned to 4 bytes, as float32 elements must be"),
    # --- mixed dtypes (an fp32 weight, bias or output beside bf16/fp16 rows) ---------------------------
    Case("out-dtype-fp16", "pyrms.rms_norm", "out_dtype='float16' beside bfloat16 rows",
         lambda: rms(out_dtype="float16"), ValueError,
         "out_dtype must be bfloat16 (the input's) or float32, got float16"),
    Case("fp32-out-misaligned", "pyrms.rms_norm", "an fp32 out 2 bytes past a 4-byte boundary",
         lambda: rms(out=A + 2, out_dtype="float32"), ValueError,
         f"out pointer {A + 2:#x} is not aligned to 4 bytes, as float32 elements must be"),
    Case("fp32-out-in-place", "pyrms.rms_norm", "out = input with out_dtype='float32' (in place across dtypes)",
         lambda: rms(out=B, out_dtype="float32"), ValueError,
         "out is input (in place), but out's dtype float32 is not input's bfloat16: in place needs one dtype"),
    Case("fp32-out-overlap", "pyrms.rms_norm", "an fp32 out whose rows reach into the input's",
         lambda: rms(out=B - 512, out_dtype="float32"), ValueError, "out and input overlap"),
    Case("out-array-fp16", "pyrms.rms_norm", "a float16 out array beside float32 rows",
         lambda: rms_arrays(out=FakeArray(A, (4, 64)), input=FakeArray(B, (4, 64), "<f4"),
                            weight=FakeArray(W, (64,), "<f4")), ValueError,
         "out has dtype float16, but the dtype is float32"),
    Case("out-array-disagrees", "pyrms.rms_norm", "a float32 out array with out_dtype='float16'",
         lambda: rms_arrays(out=FakeArray(A, (4, 64), "<f4"), out_dtype="float16"), ValueError,
         "out has dtype float32, but out_dtype is float16"),
    Case("fused-out-same-dtype", "pyrms.fused_add_rms_norm", "out given without out_dtype (the in-place form's dtype)",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, out=G), ValueError,
         "out (and out_stride) take an output of another dtype than input's bfloat16"),
    Case("fused-out-missing", "pyrms.fused_add_rms_norm", "out_dtype='float32' on raw pointers without out",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, out_dtype="float32"), TypeError,
         "out_dtype=float32 needs out, a device pointer or array of its own for the output"),
    Case("fused-out-is-residual", "pyrms.fused_add_rms_norm", "an fp32 out over the residual",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, out=B, out_dtype="float32"), ValueError,
         "out and residual overlap"),
    Case("layer-norm-bias-dtype", "pyrms.layer_norm", "a float16 bias beside a float32 weight (float16 rows)",
         lambda: pyrms.layer_norm(FakeArray(A, (4, 64)), FakeArray(B, (4, 64)), FakeArray(W, (64,), "<f4"),
                                  FakeArray(G, (64,)), 1e-5), ValueError,
         "bias has dtype float16, but the weight's and bias's dtype is float32"),
    Case("layer-norm-fp32-bias-no-weight", "pyrms.layer_norm", "a float32 bias without a weight (float16 rows)",
         lambda: pyrms.layer_norm(FakeArray(A, (4, 64)), FakeArray(B, (4, 64)), None, FakeArray(G, (64,), "<f4"),
                                  1e-5), ValueError,
         "bias has dtype float32, but the input's (a bias without a weight) is float16"),
    Case("layer-norm-fp32-weight-shape", "pyrms.layer_norm", "an fp32 weight of 63 elements for hidden 64",
         lambda: pyrms.layer_norm(FakeArray(A, (4, 64)), FakeArray(B, (4, 64)), FakeArray(W, (63,), "<f4"), None,
                                  1e-5), ValueError, "weight has shape (63,), expected (64,)"),
    Case("fused-none-weight-gemma", "pyrms.fused_add_rms_norm", "weight = None with gemma=True",
         lambda: pyrms.fused_add_rms_norm(A, B, None, 1e-6, 4, 64, gemma=True), ValueError, "gemma needs a weight"),
    Case("float-pointer", "pyrms.rms_norm", "out = 3.5", lambda: rms(out=3.5), TypeError,
         "out must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with "
         "__cuda_array_interface__ or __dlpack__, got float"),
    Case("odd-weight", "pyrms.rms_norm", "weight at an odd address (not element aligned)", lambda: rms(weight=W + 1),
         ValueError, "weight pointer 0x300001 is not aligned to 2 bytes, as bfloat16 elements must be"),
    Case("host-array", "pyrms.rms_norm", "input is a numpy array in host memory",
         lambda: rms(input=np.zeros((4, 64), np.float16)), TypeError,
         "input is ndarray memory of DLPack device type 1 (1 is the host); pyrms needs CUDA memory"),
    Case("partial-overlap", "pyrms.rms_norm", "out starts one element into input (partial overlap)", lambda: rms(out=B + 2),
         ValueError, "out and input overlap; they must be disjoint or exactly the same memory (in place)"),
    Case("out-over-weight", "pyrms.rms_norm", "out overlaps weight", lambda: rms(weight=A + 64), ValueError,
         "out and weight overlap; they must be disjoint"),
    # --- options -----------------------------------------------------------------------------------
    Case("pdl-string", "pyrms.rms_norm", "pdl = 'yes'", lambda: rms(pdl="yes"), TypeError,
         "pdl must be True or False, got 'yes'"),
    Case("pdl-int", "pyrms.fused_add_rms_norm", "pdl = 2",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, pdl=2), TypeError, "pdl must be True or False, got 2"),
    Case("pdl-none-layer-norm", "pyrms.layer_norm", "pdl = None",
         lambda: pyrms.layer_norm(A, B, W, G, 1e-6, 4, 64, pdl=None), TypeError, "pdl must be True or False, got None"),
    Case("pdl-string-backward", "pyrms.rms_norm_backward", "pdl = 'on'", lambda: backward(pdl="on"), TypeError,
         "pdl must be True or False, got 'on'"),
    # --- sizes -------------------------------------------------------------------------------------
    Case("zero-tokens", "pyrms.rms_norm", "num_tokens = 0", lambda: rms(num_tokens=0), ValueError,
         "num_tokens must be between 1 and 2147483647, got 0"),
    Case("negative-tokens", "pyrms.rms_norm", "num_tokens = -3", lambda: rms(num_tokens=-3), ValueError,
         "num_tokens must be between 1 and 2147483647, got -3"),
    Case("zero-hidden", "pyrms.rms_norm", "hidden_size = 0", lambda: rms(hidden_size=0), ValueError,
         "hidden_size must be between 1 and 2147483647, got 0"),
    Case("negative-hidden", "pyrms.rms_norm", "hidden_size = -64", lambda: rms(hidden_size=-64), ValueError,
         "hidden_size must be between 1 and 2147483647, got -64"),
    Case("tokens-over-int32", "pyrms.rms_norm", "num_tokens = 2**31", lambda: rms(num_tokens=2**31), ValueError,
         "num_tokens must be between 1 and 2147483647, got 2147483648"),
    Case("bool-hidden", "pyrms.rms_norm", "hidden_size = True", lambda: rms(hidden_size=True), TypeError,
         "hidden_size must be an int, got bool True"),
    Case("str-hidden", "pyrms.rms_norm", "hidden_size = '64'", lambda: rms(hidden_size="64"), TypeError,
         "hidden_size must be an int, got str '64'"),
    Case("product-overflow", "pyrms.rms_norm", "(2**31-1) x (2**31-1) elements: 2^62, byte offsets overflow int64",
         lambda: rms(num_tokens=2**31 - 1, hidden_size=2**31 - 1), ValueError,
         "input spans 2147483647 rows of stride 2147483647: more than 2^59 elements"),
    Case("stride-overflow", "pyrms.layer_norm", "input_stride = 2**62 (4 rows: 2^64 elements)",
         lambda: pyrms.layer_norm(A, B, W, G, 1e-6, 4, 64, input_stride=2**62), ValueError,
         "input spans 4 rows of stride 4611686018427387904: more than 2^59 elements"),
    Case("stride-over-int64", "pyrms.rms_norm", "out_stride = 2**64", lambda: rms(out_stride=2**64), ValueError,
         "out_stride must be between 1 and 9223372036854775807, got 18446744073709551616"),
    Case("stride-below-hidden", "pyrms.rms_norm", "input_stride = 63 < hidden_size 64", lambda: rms(input_stride=63),
         ValueError, "input_stride must be >= hidden_size (64) so rows do not overlap, got 63"),
    Case("residual-stride-below-hidden", "pyrms.fused_add_rms_norm", "residual_stride = 10 < hidden_size 64",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, residual_stride=10), ValueError,
         "residual_stride must be >= hidden_size (64) so rows do not overlap, got 10"),
    Case("grad-input-stride", "pyrms.rms_norm_backward", "grad_input_stride = 1 < hidden_size 64",
         lambda: backward(grad_input_stride=1), ValueError,
         "grad_input_stride must be >= hidden_size (64) so rows do not overlap, got 1"),
    # --- dtypes ------------------------------------------------------------------------------------
    Case("dtype-int8", "pyrms.rms_norm", "dtype = 'int8'", lambda: rms(dtype="int8"), ValueError,
         "dtype 'int8' is not supported; allowed: bfloat16, float16, float32"),
    Case("dtype-float64", "pyrms.rms_norm", "dtype = numpy.float64", lambda: rms(dtype=np.float64), ValueError,
         "dtype float64 is not supported; allowed: bfloat16, float16, float32"),
    Case("dtype-object", "pyrms.rms_norm", "dtype = object()", lambda: rms(dtype=object()), TypeError,
         "dtype must be a string, numpy dtype or pyrms DType, got <object object"),
    Case("grad-weight-dtype", "pyrms.rms_norm_backward", "grad_weight_dtype = 'float16' for bfloat16 data",
         lambda: backward(grad_weight_dtype="float16"), ValueError,
         "grad_weight dtype must be bfloat16 (the dtype) or float32, got float16"),
    # --- arrays that disagree with the arguments ---------------------------------------------------
    Case("array-shape", "pyrms.rms_norm", "input array of shape (4, 65) for hidden_size 64",
         lambda: rms_arrays(input=FakeArray(B, (4, 65))), ValueError,
         "input has shape (4, 65), expected (4, 64)"),
    Case("array-3d", "pyrms.rms_norm", "input of shape (2, 2, 64) whose leading dimensions do not collapse, "
         "beside an out of shape (4, 64)", lambda: rms_arrays(input=FakeArray(B, (2, 2, 64), strides=(512, 128, 2))),
         ValueError, "out has shape (4, 64), but input has (2, 2, 64)"),
    Case("array-5d", "pyrms.rms_norm", "input and out of shape (2, 2, 2, 2, 64) whose leading dimensions collapse "
         "to four", lambda: rms_arrays(input=FakeArray(B, (2, 2, 2, 2, 64), strides=(8192, 2048, 512, 128, 2)),
                                       out=FakeArray(A, (2, 2, 2, 2, 64), strides=(8192, 2048, 512, 128, 2))),
         ValueError, "pyrms addresses at most 3"),
    Case("array-out-rows-overlap", "pyrms.rms_norm", "out of shape (2, 2, 64) whose rows overlap (element strides "
         "96, 32)", lambda: rms_arrays(input=FakeArray(B, (2, 2, 64), strides=(512, 128, 2)),
                                       out=FakeArray(A, (2, 2, 64), strides=(192, 64, 2))),
         ValueError, "makes rows of out overlap"),
    Case("array-dtype", "pyrms.rms_norm", "input float32 while out and weight are float16",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), typestr="<f4")), ValueError,
         "out has dtype float16, but the dtype is float32 (that of input)"),
    Case("array-dtype-argument", "pyrms.rms_norm", "float16 arrays with dtype='bfloat16'",
         lambda: rms_arrays(dtype="bfloat16"), ValueError, "input has dtype float16, but the dtype is bfloat16"),
    Case("array-typestr-f8", "pyrms.rms_norm", "input typestr '<f8'",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), typestr="<f8")), ValueError,
         "input: array typestr '<f8' is not supported"),
    Case("array-typestr-i1", "pyrms.rms_norm", "an int8 out (typestr '|i1': only the quantizing ops write int8)",
         lambda: rms_arrays(out=FakeArray(A, (4, 64), typestr="|i1")), ValueError,
         "out: array typestr '|i1' is not supported; allowed: '<f2' (float16), '<f4' (float32)"),
    Case("array-raw-2-byte", "pyrms.rms_norm", "input typestr '<i2' without dtype='bfloat16'",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), typestr="<i2")), ValueError,
         "input has 2-byte storage (typestr '<i2') without a float type: pass dtype='bfloat16'"),
    Case("array-strides-unaligned", "pyrms.rms_norm", "input row stride of 129 bytes (not whole elements)",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), strides=(129, 2))), ValueError,
         "input: stride 129 bytes of dimension 0 is not a multiple of the 2-byte float16 element"),
    Case("array-non-contiguous", "pyrms.rms_norm", "input with stride 2 elements along hidden",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), strides=(256, 4))), ValueError,
         "input must be contiguous along the hidden dimension (stride 1)"),
    Case("array-rows-overlap", "pyrms.rms_norm", "input rows 32 elements apart for hidden_size 64",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), strides=(64, 2))), ValueError,
         "input has row stride 32 < hidden_size 64: its rows overlap"),
    Case("array-broadcast-out", "pyrms.rms_norm", "out broadcast over rows (row stride 0)",
         lambda: rms_arrays(out=FakeArray(A, (4, 64), strides=(0, 2))), ValueError,
         "out has row stride 0 < hidden_size 64: its rows overlap"),
    Case("array-negative-strides", "pyrms.rms_norm", "input with a negative row stride",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), strides=(-128, 2))), ValueError,
         "input: strides entries must be >= 0, got (-64, 1)"),
    Case("array-stride-disagrees", "pyrms.rms_norm", "input_stride=100 for an array whose rows are 128 apart",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), strides=(256, 2)), input_stride=100), ValueError,
         "input_stride=100 disagrees with input's row stride 128"),
    Case("array-weight-shape", "pyrms.rms_norm", "weight of shape (64, 1)",
         lambda: rms_arrays(weight=FakeArray(W, (64, 1))), ValueError, "weight has shape (64, 1), expected (64,)"),
    Case("array-null", "pyrms.rms_norm", "input array with a null data pointer",
         lambda: rms_arrays(input=FakeArray(0, (4, 64))), ValueError, "input has a null data pointer"),
    Case("array-cai-raises", "pyrms.rms_norm", "weight whose __cuda_array_interface__ raises (torch's, for a "
         "parameter that requires grad)", lambda: rms_arrays(weight=RefusingInterface()), TypeError,
         "weight: its __cuda_array_interface__ failed: Can't get __cuda_array_interface__"),
    Case("torch-out-requires-grad", "pyrms.rms_norm", "out is a torch tensor (a parameter) that requires grad",
         lambda: rms(out=TorchLikeTensor(A, (4, 64), requires_grad=True), input=TorchLikeTensor(B, (4, 64)),
                     weight=TorchLikeTensor(W, (64,))), ValueError,
         "out requires grad and pyrms would write into it behind autograd's back: pass out.detach()"),
    Case("torch-cpu-tensor", "pyrms.rms_norm", "input is a torch tensor on the CPU",
         lambda: rms(out=TorchLikeTensor(A, (4, 64)), input=TorchLikeTensor(B, (4, 64), device=("cpu", None)),
                     weight=TorchLikeTensor(W, (64,))), ValueError,
         "input is a torch tensor on cpu; pyrms needs CUDA memory (use .cuda())"),
    Case("torch-float64", "pyrms.rms_norm", "a torch.float64 weight",
         lambda: rms(out=TorchLikeTensor(A, (4, 64)), input=TorchLikeTensor(B, (4, 64)),
                     weight=TorchLikeTensor(W, (64,), dtype="torch.float64")), ValueError,
         "weight has dtype torch.float64; allowed: torch.bfloat16, torch.float16, torch.float32"),
    Case("torch-float8-out", "pyrms.rms_norm", "a torch.float8_e4m3fn out (only the quantizing ops write fp8)",
         lambda: rms(out=TorchLikeTensor(A, (4, 64), dtype="torch.float8_e4m3fn"), input=TorchLikeTensor(B, (4, 64)),
                     weight=TorchLikeTensor(W, (64,))), ValueError,
         "out has dtype torch.float8_e4m3fn; allowed: torch.bfloat16, torch.float16, torch.float32"),
    Case("array-masked", "pyrms.rms_norm", "input with a __cuda_array_interface__ mask",
         lambda: rms_arrays(input=FakeArray(B, (4, 64), mask=object())), ValueError,
         "input: masked arrays (__cuda_array_interface__ 'mask') are not supported"),
    Case("array-data-not-int", "pyrms.rms_norm", "input whose data pointer is the string 'x'",
         lambda: rms_arrays(input=RawInterface(dict(shape=(4, 64), typestr="<f2", data=("x", False), version=3))),
         TypeError, "input: data pointer must be an int, got str 'x'"),
    Case("array-no-typestr", "pyrms.rms_norm", "input whose __cuda_array_interface__ has no 'typestr'",
         lambda: rms_arrays(input=RawInterface(dict(shape=(4, 64), data=(B, False), version=3))), ValueError,
         "input: __cuda_array_interface__"),
    Case("array-interface-not-dict", "pyrms.rms_norm", "input whose __cuda_array_interface__ is None",
         lambda: rms_arrays(input=RawInterface(None)), TypeError, "input: __cuda_array_interface__"),
    Case("array-other-device", "pyrms.rms_norm", "input array on device 1, launch on device 0",
         lambda: rms(input=Tensor(B, (4, 64), "bfloat16", device=1)), ValueError,
         "input is on device 1, but the launch runs on device 0", needs="device"),
    # --- epsilon -----------------------------------------------------------------------------------
    Case("epsilon-nan", "pyrms.rms_norm", "epsilon = NaN", lambda: rms(epsilon=math.nan), ValueError,
         "epsilon must be finite and >= 0, got nan"),
    Case("epsilon-inf", "pyrms.rms_norm", "epsilon = inf", lambda: rms(epsilon=math.inf), ValueError,
         "epsilon must be finite and >= 0, got inf"),
    Case("epsilon-negative", "pyrms.rms_norm", "epsilon = -1e-6", lambda: rms(epsilon=-1e-6), ValueError,
         "epsilon must be finite and >= 0, got -1e-06"),
    Case("epsilon-str", "pyrms.rms_norm", "epsilon = '1e-6'", lambda: rms(epsilon="1e-6"), TypeError,
         "epsilon must be a float, got str '1e-6'"),
    Case("epsilon-nan-layer-norm", "pyrms.layer_norm", "epsilon = NaN",
         lambda: pyrms.layer_norm(A, B, W, G, math.nan, 4, 64), ValueError, "epsilon must be finite and >= 0, got nan"),
    Case("epsilon-beyond-float32", "pyrms.rms_norm", "epsilon = 1e300 (finite, but no float32 holds it)",
         lambda: rms(epsilon=1e300), ValueError, "epsilon", needs="device"),
    # --- the rest of the family ---------------------------------------------------------------------
    Case("fused-aliased", "pyrms.fused_add_rms_norm", "input and residual the same memory",
         lambda: pyrms.fused_add_rms_norm(A, A, W, 1e-6, 4, 64), ValueError, "input and residual overlap; they must be disjoint"),
    Case("fused-sum-precision-unknown", "pyrms.fused_add_rms_norm", "sum_precision = 'fp16'",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, sum_precision="fp16"), ValueError,
         "sum_precision must be one of ('rounded', 'fp32') (or None), got 'fp16'"),
    Case("fused-residual-dtype-other", "pyrms.fused_add_rms_norm", "residual_dtype = float16 beside bfloat16 rows",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, residual_dtype="float16"), ValueError,
         "residual dtype must be bfloat16 (the input's) or float32, got float16"),
    Case("fused-fp32-residual-rounded", "pyrms.fused_add_rms_norm",
         "residual_dtype = float32 with sum_precision = 'rounded' (an fp32 residual stores the fp32 sum)",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, residual_dtype="float32", sum_precision="rounded"),
         ValueError, "a float32 residual beside bfloat16 rows stores the fp32 sum exactly, which is then what is "
         "normalized: sum_precision must be 'fp32' (or None), got 'rounded'"),
    Case("fused-fp32-residual-misaligned", "pyrms.fused_add_rms_norm", "an fp32 residual at a 2-byte aligned address",
         lambda: pyrms.fused_add_rms_norm(A, B + 2, W, 1e-6, 4, 64, residual_dtype="float32"), ValueError,
         "residual pointer 0x200002 is not aligned to 4 bytes, as float32 elements must be"),
    Case("fused-fp32-residual-overlaps-input", "pyrms.fused_add_rms_norm",
         "an fp32 residual whose rows overlap the input's (4 x 64 bf16 at A, the residual 256 bytes past A)",
         lambda: pyrms.fused_add_rms_norm(A, A + 256, W, 1e-6, 4, 64, residual_dtype="float32"), ValueError,
         "input and residual overlap; they must be disjoint"),
    Case("fused-fp32-residual-rows-overlap", "pyrms.fused_add_rms_norm",
         "an fp32 residual with residual_stride = 32 < hidden_size 64 (its own rows overlap)",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, residual_dtype="float32", residual_stride=32),
         ValueError, "residual_stride must be >= hidden_size (64) so rows do not overlap, got 32"),
    Case("fused-fp32-out-with-fp32-sum", "pyrms.fused_add_rms_norm",
         "out_dtype = 'float32' with sum_precision = 'fp32' (its kernel writes the normalized row over input)",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, sum_precision="fp32", out=W + 4096,
                                          out_dtype="float32"), ValueError,
         "out_dtype=float32 beside bfloat16 rows is offered with sum_precision='rounded' only"),
    Case("fused-fp32-out-with-fp32-residual", "pyrms.fused_add_rms_norm",
         "out_dtype = 'float32' with an fp32 residual (residual_dtype = float32: the fp32 sum)",
         lambda: pyrms.fused_add_rms_norm(A, B, W, 1e-6, 4, 64, residual_dtype="float32", out=W + 4096,
                                          out_dtype="float32"), ValueError,
         "out_dtype=float32 beside bfloat16 rows is offered with sum_precision='rounded' only"),
    Case("layer-norm-float-bias", "pyrms.layer_norm", "bias = 0.0 (a number, not a pointer; None means no bias)",
         lambda: pyrms.layer_norm(A, B, W, 0.0, 1e-6, 4, 64),
         TypeError, "bias must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with "
         "__cuda_array_interface__ or __dlpack__, got float"),
    Case("backward-grad-weight-without-weight", "pyrms.rms_norm_backward", "grad_weight given with weight = None",
         lambda: backward(weight=None), ValueError,
         "grad_weight was given, but weight is None: without a weight there is no weight gradient; pass grad_weight=None"),
    Case("backward-none-weight-gemma", "pyrms.rms_norm_backward", "weight = None with gemma=True",
         lambda: backward(weight=None, grad_weight=None, gemma=True), ValueError, "gemma needs a weight"),
    Case("backward-none-weight-grad-dtype", "pyrms.rms_norm_backward",
         "weight = None with grad_weight_dtype='float32' (no gradient to write in it)",
         lambda: backward(weight=None, grad_weight=None, grad_weight_dtype="float32"), ValueError,
         "grad_weight_dtype='float32' was given, but no parameter gradient is written"),
    Case("layer-norm-backward-none-weight-grad-weight", "pyrms.layer_norm_backward", "grad_weight given with weight = None",
         lambda: pyrms.layer_norm_backward(A, G, None, B, B + 65536, None, 1e-6, 4, 64), ValueError,
         "grad_weight was given, but weight is None"),
    Case("backward-rows-per-block", "pyrms.rms_norm_backward", "rows_per_block = 17 (not 1 or a multiple of 16)",
         lambda: backward(rows_per_block=17), ValueError, "rows_per_block must be 1 or a multiple of 16, got 17"),
    Case("backward-grad-weight-overlap", "pyrms.rms_norm_backward", "grad_weight overlaps weight",
         lambda: backward(grad_weight=W + 2), ValueError, "grad_weight and weight overlap; they must be disjoint"),
    Case("backward-workspace-misaligned", "pyrms.rms_norm_backward", "workspace pointer 8 bytes past a 16-byte boundary",
         lambda: backward(workspace=(5 << 20) + 8), ValueError, "workspace pointer 0x500008 must be non-null and 16-byte aligned"),
    Case("backward-workspace-small", "pyrms.rms_norm_backward", "a 16-byte workspace buffer",
         lambda: backward(workspace=type("Buf", (), {"ptr": 5 << 20, "nbytes": 16})()), ValueError,
         "workspace has 16 bytes; this launch needs 1152 (pyrms.backward_workspace_bytes)"),
    Case("backward-workspace-type", "pyrms.rms_norm_backward", "workspace = 'big'", lambda: backward(workspace="big"),
         TypeError, "workspace must be a device pointer (int), a pyrms.DeviceBuffer or an array with __cuda_array_interface__"),
    Case("backward-workspace-closed", "pyrms.rms_norm_backward", "a closed DeviceBuffer as workspace",
         lambda: backward(workspace=closed(pyrms.DeviceBuffer(4096))), ValueError, "buffer is closed", needs="device"),
    Case("layer-norm-backward-aliased-grads", "pyrms.layer_norm_backward", "grad_bias is grad_weight",
         lambda: pyrms.layer_norm_backward(A, G, G, B, B + 65536, W, 1e-6, 4, 64), ValueError,
         "grad_weight and grad_bias overlap; they must be disjoint"),
    Case("workspace-bytes-zero", "pyrms.backward_workspace_bytes", "num_tokens = 0",
         lambda: pyrms.backward_workspace_bytes(0, 64), ValueError, "num_tokens must be between 1 and 2147483647, got 0"),
    Case("seed-too-wide", "pyrms.seed_rms_norm", "hidden_size 16384 (2048 threads: the seed's limit)",
         lambda: pyrms.seed_rms_norm(A, B, W, 1e-6, 4, 16384), ValueError,
         "the seed kernel launches hidden_size / VEC_SIZE = 16384 / 8 = 2048 threads, more than the 1024 a block allows"),
    Case("seed-misaligned", "pyrms.seed_rms_norm", "out 2 bytes past a 16-byte boundary",
         lambda: pyrms.seed_rms_norm(A + 2, B, W, 1e-6, 4, 5120), ValueError,
         "the seed kernel needs 16-byte aligned pointers (a seed defect); out is 0x100002"),
    # --- quantized outputs -----------------------------------------------------------------------------
    Case("quant-static-scale-zero", "pyrms.rms_norm_quant", "static scale = 0.0",
         lambda: quant(mode="static", group_size=None, scale=0.0), ValueError,
         "scale must be finite and > 0 in float32 (between 2^-149 and 3.402823e+38), got 0.0"),
    Case("quant-static-scale-nan", "pyrms.rms_norm_quant", "static scale = nan",
         lambda: quant(mode="static", group_size=None, scale=math.nan), ValueError, "scale must be finite and > 0"),
    Case("quant-static-scale-inf", "pyrms.fused_add_rms_norm_quant", "static scale = inf",
         lambda: pyrms.fused_add_rms_norm_quant(A, B, B + 65536, W, 1e-6, 4, 256, scale=math.inf), ValueError,
         "scale must be finite and > 0"),
    Case("quant-scale-ub-negative", "pyrms.rms_norm_quant", "per_token scale_ub = -1.0",
         lambda: quant(mode="per_token", group_size=None, scale_ub=-1.0), ValueError,
         "scale_ub must be finite and > 0 in float32"),
    Case("quant-group-32", "pyrms.rms_norm_quant", "group_size = 32", lambda: quant(group_size=32), ValueError,
         "group_size must be one of (64, 128), got 32"),
    Case("quant-group-not-dividing", "pyrms.rms_norm_quant", "group_size 128 beside hidden_size 192",
         lambda: quant(group_size=128, hidden_size=192), ValueError,
         "per_group needs hidden_size a multiple of group_size 128 and at most 1024 groups"),
    Case("quant-too-many-groups", "pyrms.rms_norm_quant", "hidden_size 65600 in groups of 64 (1025 groups)",
         lambda: quant(hidden_size=65600), ValueError, "at most 1024 groups (65536 elements), got hidden_size 65600"),
    Case("quant-group-static", "pyrms.rms_norm_quant", "group_size = 64 with mode='static'",
         lambda: quant(mode="static", scale=0.5), ValueError, "group_size applies to mode='per_group' only"),
    Case("quant-ue8m0-per-token", "pyrms.rms_norm_quant", "ue8m0 = True with mode='per_token'",
         lambda: quant(mode="per_token", group_size=None, ue8m0=True), ValueError,
         "ue8m0, column_major_scales and scale_stride apply to mode='per_group' only"),
    Case("quant-group-scale-ub", "pyrms.rms_norm_quant", "scale_ub = 2.0 with mode='per_group'",
         lambda: quant(scale_ub=2.0), ValueError, "scale_ub applies to mode='per_token' only"),
    Case("quant-group-scale-float", "pyrms.rms_norm_quant", "per_group scale = 0.5 (a value, not the scales' pointer)",
         lambda: quant(scale=0.5), TypeError, "scale must be a device pointer (int) to the per-group float32 scales"),
    Case("quant-group-scale-misaligned", "pyrms.rms_norm_quant", "per_group scales 2 bytes past a 4-byte boundary",
         lambda: quant(scale=G + 2), ValueError, "scale pointer 0x400002 is not aligned to 4 bytes"),
    Case("quant-group-scale-over-out", "pyrms.rms_norm_quant", "per_group scales inside out's last row",
         lambda: quant(scale=A + 3 * 256 + 8), ValueError, "out and scale overlap; they must be disjoint"),
    Case("quant-group-scale-over-weight", "pyrms.rms_norm_quant",
         "column-major scales of group stride 4096 reaching the weight",
         lambda: quant(scale=W - 3 * 4096 * 4, column_major_scales=True, scale_stride=4096), ValueError,
         "weight and scale overlap"),
    Case("quant-group-row-stride", "pyrms.rms_norm_quant", "row-major scale_stride 3 < 4 groups per row",
         lambda: quant(scale_stride=3), ValueError, "scale_stride must be >= the groups per row (4) for row-major"),
    Case("quant-group-column-stride", "pyrms.rms_norm_quant", "column-major scale_stride 3 < num_tokens 4",
         lambda: quant(column_major_scales=True, scale_stride=3), ValueError,
         "scale_stride must be >= num_tokens (4) for column-major scales"),
    Case("quant-group-stride-bool", "pyrms.rms_norm_quant", "scale_stride = True",
         lambda: quant(scale_stride=True), TypeError, "scale_stride must be an int, got bool True"),
    Case("quant-ue8m0-int", "pyrms.rms_norm_quant", "ue8m0 = 1", lambda: quant(ue8m0=1), TypeError,
         "ue8m0 must be True or False, got 1"),
    Case("quant-out-float16-array", "pyrms.rms_norm_quant", "out a float16 array",
         lambda: quant(out=FakeArray(A, (4, 256))), ValueError,
         "out: array typestr '<f2' is not a quantized output type; allowed: '|i1' (int8), or 1-byte storage"),
    Case("quant-out-int8-as-fp8", "pyrms.rms_norm_quant", "an int8 out array with out_dtype='float8_e4m3fn'",
         lambda: quant(out=FakeArray(A, (4, 256), typestr="|i1"), out_dtype="float8_e4m3fn"), ValueError,
         "out has dtype int8, but out_dtype is float8_e4m3fn"),
    Case("quant-out-raw-bytes", "pyrms.rms_norm_quant", "a uint8 out array without out_dtype",
         lambda: quant(out=TorchLikeTensor(A, (4, 256), dtype="torch.uint8")), ValueError,
         "out has 1-byte storage (torch.uint8) that names no quantized dtype: pass out_dtype="),
    Case("quant-out-rows", "pyrms.rms_norm_quant", "an int8 out array of 5 rows beside num_tokens=4",
         lambda: quant(out=FakeArray(A, (5, 256), typestr="|i1")), ValueError,
         "out has shape (5, 256), expected (4, 256)"),
    Case("quant-scale-transposed", "pyrms.rms_norm_quant", "a transposed (column-major) scale view without "
         "column_major_scales", lambda: quant(scale=FakeArray(G, (4, 4), typestr="<f4", strides=(4, 32))), ValueError,
         "scale has strides (1, 8) (elements); expected strides (S, 1) with S >= 4; column-major scales (strides "
         "(1, S)) need column_major_scales=True"),
    Case("quant-scale-float16", "pyrms.rms_norm_quant", "a float16 per-group scale array",
         lambda: quant(scale=FakeArray(G, (4, 4))), ValueError, "scale has dtype float16; scales are float32"),
    Case("quant-input-int8", "pyrms.rms_norm_quant", "an int8 input array (only out may be int8)",
         lambda: quant(input=FakeArray(B, (4, 256), typestr="|i1")), ValueError,
         "input: array typestr '|i1' is not supported; allowed: '<f2' (float16), '<f4' (float32)"),
    Case("quant-norm-out-misaligned", "pyrms.rms_norm_quant", "norm_out 1 byte past a bfloat16 boundary",
         lambda: quant(norm_out=A + 65537), ValueError, "norm_out pointer 0x110001 is not aligned to 2 bytes"),
    Case("quant-norm-out-over-input", "pyrms.rms_norm_quant", "norm_out inside the input's rows",
         lambda: quant(norm_out=B + 100), ValueError, "input and norm_out overlap; they must be disjoint"),
    Case("quant-norm-out-stride-alone", "pyrms.rms_norm_quant", "norm_out_stride = 300 without a norm_out",
         lambda: quant(norm_out_stride=300), ValueError, "norm_out_stride applies with a norm_out only"),
    Case("quant-norm-out-float32", "pyrms.fused_add_rms_norm_quant", "an fp32 norm_out array beside bfloat16 rows",
         lambda: pyrms.fused_add_rms_norm_quant(A, B, B + 65536, W, 1e-6, 4, 256, scale=0.5, dtype="bfloat16",
                                                norm_out=FakeArray(A + 65536, (4, 256), "<f4")), ValueError,
         "norm_out has dtype float32, but the dtype is bfloat16"),
    Case("quant-sum-precision-unknown", "pyrms.fused_add_rms_norm_quant", "sum_precision = 'fp16'",
         lambda: pyrms.fused_add_rms_norm_quant(A, B, B + 65536, W, 1e-6, 4, 256, scale=0.5, sum_precision="fp16"),
         ValueError, "sum_precision must be one of ('rounded', 'fp32') (or None), got 'fp16'"),
    # --- streams, events, tensors, buffers ----------------------------------------------------------
    Case("stream-str", "pyrms.rms_norm", "stream = 'default'", lambda: rms(stream="default"), TypeError,
         "stream must be a pyrms Stream, a raw CUstream handle (int), an object with an int .cuda_stream"),
    Case("stream-negative", "pyrms.rms_norm", "stream = -1", lambda: rms(stream=-1), ValueError,
         "stream handle must be >= 0 and below 2**64, got -1"),
    Case("stream-over-64-bits", "pyrms.rms_norm", "stream = 2**64", lambda: rms(stream=2**64), ValueError,
         "stream handle", needs="device"),
    Case("stream-closed", "pyrms.rms_norm", "a closed pyrms.Stream", lambda: rms(stream=closed(pyrms.Stream.wrap(0x5678))),
         ValueError, "stream is closed"),
    Case("stream-closed-synchronize", "pyrms.Stream.synchronize", "synchronize() after close()",
         lambda: closed(pyrms.Stream()).synchronize(), ValueError, "stream is closed", needs="device"),
    Case("event-closed-record", "pyrms.Event.record", "record() after close()",
         lambda: closed(pyrms.Event()).record(), ValueError, "event is closed", needs="device"),
    Case("event-closed-elapsed", "pyrms.Event.elapsed_ms", "elapsed_ms() since a closed event",
         lambda: pyrms.Event().elapsed_ms(closed(pyrms.Event())), ValueError, "event is closed", needs="device"),
    Case("event-no-timing", "pyrms.Event.elapsed_ms", "elapsed_ms() of events created with timing=False",
         lambda: pyrms.Event(timing=False).elapsed_ms(pyrms.Event(timing=False)), ValueError,
         "elapsed_ms needs two events created with timing=True", needs="device"),
    Case("stream-wrap-negative", "pyrms.Stream.wrap", "handle -1", lambda: pyrms.Stream.wrap(-1), ValueError,
         "stream handle must be >= 0 and below 2**64, got -1"),
    Case("tensor-closed", "pyrms.rms_norm", "a closed pyrms.Tensor as out",
         lambda: rms(out=closed(Tensor(A, (4, 64), "bfloat16"))), ValueError, "tensor is closed"),
    Case("tensor-view-of-freed", "pyrms.rms_norm", "a view of a Tensor whose memory was freed",
         lambda: view_of_freed(), ValueError, "tensor is closed", needs="device"),
    Case("tensor-negative-ptr", "pyrms.Tensor", "ptr = -1", lambda: Tensor(-1, (4, 64), "bfloat16"), ValueError,
         "ptr must be in [0, 2**64), got -1"),
    Case("tensor-negative-shape", "pyrms.Tensor", "shape (4, -1)", lambda: Tensor(A, (4, -1), "bfloat16"), ValueError,
         "shape entries must be >= 0, got (4, -1)"),
    Case("tensor-strides-rank", "pyrms.Tensor", "strides (1,) for a 2-D shape",
         lambda: Tensor(A, (4, 64), "bfloat16", strides=(1,)), ValueError,
         "strides (1,) must have one entry per dimension of shape (4, 64)"),
    Case("tensor-view-outside", "pyrms.Tensor.view", "a view past the end of the tensor",
         lambda: Tensor(A, (4, 64), "bfloat16").view(200, (1, 64)), ValueError,
         "covers elements [200, 264), outside the 256 elements this tensor spans"),
    Case("tensor-no-interface", "pyrms.Tensor.from_cuda_array", "an object without __cuda_array_interface__",
         lambda: Tensor.from_cuda_array(object()), TypeError, "object does not expose __cuda_array_interface__"),
    Case("tensor-empty-overflow", "pyrms.Tensor.empty", "shape (2**32, 2**32) float32: 2^66 bytes",
         lambda: Tensor.empty((2**32, 2**32), "float32"), ValueError, "nbytes", needs="device"),
    Case("buffer-zero", "pyrms.DeviceBuffer", "nbytes = 0", lambda: pyrms.DeviceBuffer(0), ValueError,
         "nbytes must be an int > 0, got 0"),
    Case("buffer-float", "pyrms.DeviceBuffer", "nbytes = 1.5", lambda: pyrms.DeviceBuffer(1.5), ValueError,
         "nbytes must be an int > 0, got 1.5"),
    Case("buffer-2-64", "pyrms.DeviceBuffer", "nbytes = 2**64", lambda: pyrms.DeviceBuffer(2**64), ValueError, "nbytes",
         needs="device"),
    Case("buffer-out-of-memory", "pyrms.DeviceBuffer", "more bytes than the device has free (fake: 64 MiB free)",
         lambda: pyrms.DeviceBuffer(pyrms.get_device(0).mem_info()[0] + (1 << 30)), errors.OutOfMemoryError,
         "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", needs="device"),
    Case("buffer-closed", "pyrms.DeviceBuffer.ptr", "ptr of a closed buffer", lambda: closed(pyrms.DeviceBuffer(64)).ptr,
         ValueError, "buffer is closed", needs="device"),
    Case("pinned-negative", "pyrms.PinnedBuffer", "nbytes = -1", lambda: pyrms.PinnedBuffer(-1), ValueError,
         "nbytes must be an int > 0, got -1"),
    Case("device-out-of-range", "pyrms.get_device", "ordinal 5 on a machine with one device",
         lambda: pyrms.get_device(5), ValueError, "device ordinal 5 is out of range", needs="device"),
    Case("device-str", "pyrms.get_device", "ordinal '0'", lambda: pyrms.get_device("0"), TypeError,
         "device ordinal must be an int, got str '0'"),
    Case("capture-legacy-stream", "pyrms.driver.capture", "capture of the legacy default stream",
         lambda: driver.capture(None).__enter__(), ValueError, "cannot capture the legacy default stream (handle 0)"),
    # --- compiling -----------------------------------------------------------------------------------
    Case("arch-garbage", "pyrms.compiler.compile_source", "arch = 'sm_1'",
         lambda: compiler.compile_source("rms_norm.cu", arch="sm_1"), ValueError, "arch 'sm_1' is not a CUDA arch"),
    Case("arch-unsupported", "pyrms.compiler.compile_source", "arch = 'sm_37' (dropped by NVRTC 13)",
         lambda: compiler.compile_source("rms_norm.cu", arch="sm_37"), ValueError,
         "arch 'sm_37' is not supported by NVRTC"),
    Case("source-missing", "pyrms.compiler.compile_source", "a source that does not exist",
         lambda: compiler.compile_source("nope.cu", arch="sm_90"), ValueError, "kernel source 'nope.cu' not found"),
    Case("nvrtc-option", "pyrms.compiler.compile_source", "an option NVRTC does not know",
         lambda: compiler.compile_source("seed_rms_norm.cu", arch="sm_90", options=["--no-such-option"], use_cache=False),
         errors.CudaError, "--no-such-option"),
    Case("headers-missing", "pyrms.compiler.compile_source", "no CUDA headers anywhere (no wheel, empty CUDA_HOME)",
         compile_without_headers, errors.HeaderNotFoundError,
         "CUDA headers 'cccl' (cub/block/block_reduce.cuh) not found; looked in: cuda.pathfinder (found nothing)"),
    # --- no driver -------------------------------------------------------------------------------------
    Case("no-driver-rms-norm", "pyrms.rms_norm", "valid arguments, no CUDA driver", lambda: rms(), errors.NoDriverError,
         "no CUDA driver found: ", needs="no-driver"),
    Case("no-driver-stream", "pyrms.Stream", "a stream, no CUDA driver", lambda: pyrms.Stream(), errors.NoDriverError,
         "no CUDA driver found: ", needs="no-driver"),
    Case("no-driver-tensor", "pyrms.Tensor.from_numpy", "a host array to upload, no CUDA driver",
         lambda: Tensor.from_numpy(np.zeros(4, np.float32)), errors.NoDriverError, "no CUDA driver found: ",
         needs="no-driver"),
    Case("no-driver-demo", "python -m pyrms.demo", "the demo, no CUDA driver", lambda: demo("--seed", "1"), CliExit,
         "exit status 2: pyrms.demo: no CUDA GPU available: no CUDA driver found: ", needs="no-driver"),
    # --- command lines ---------------------------------------------------------------------------------
    Case("bench-tokens-zero", "python -m pyrms.bench", "--tokens 0", lambda: bench("--tokens", "0"), CliExit,
         "exit status 2: python -m pyrms.bench: error: argument --tokens: --tokens: '0' is not a positive integer"),
    Case("bench-shapes", "python -m pyrms.bench", "--shapes 4096", lambda: bench("--shapes", "4096"), CliExit,
         "exit status 2: python -m pyrms.bench: error: argument --shapes: --shapes: '4096' is not TOKENSxHIDDEN"),
    Case("bench-impls", "python -m pyrms.bench", "--impls nope", lambda: bench("--impls", "nope"), CliExit,
         "exit status 2: python -m pyrms.bench: error: argument --impls: --impls: 'nope' is not one of"),
    Case("bench-epsilon", "python -m pyrms.bench", "--epsilon nan", lambda: bench("--epsilon", "nan"), CliExit,
         "exit status 2: python -m pyrms.bench: error: --epsilon must be finite and >= 0, got nan"),
    Case("bench-shapes-and-tokens", "python -m pyrms.bench", "--shapes 1x1 --tokens 4",
         lambda: bench("--shapes", "1x1", "--tokens", "4"), CliExit,
         "exit status 2: python -m pyrms.bench: error: --shapes replaces --tokens and --hidden"),
    Case("demo-tokens-zero", "python -m pyrms.demo", "--tokens 0", lambda: demo("--tokens", "0"), CliExit,
         "exit status 2: python -m pyrms.demo: error: --tokens and --hidden must be >= 1, got 0 and 5120"),
    Case("demo-dtype", "python -m pyrms.demo", "--dtype int8", lambda: demo("--dtype", "int8"), CliExit,
         "exit status 2: python -m pyrms.demo: error: argument --dtype: dtype 'int8' is not supported; allowed: "
         "bfloat16, float16, float32 (aliases: bf16"),
]

_ids = [case.id for case in CASES]
assert len(_ids) == len(set(_ids)), "case ids must be unique"
