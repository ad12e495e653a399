"""The two calling conventions of pyrms.rms_norm and pyrms.layer_norm (pyrms/ops/_convention.py), on the CPU through
tests/support/fake_driver.py: an input-first call launches exactly what the out-first call on the same operands
launches and returns what the docstrings say; raw pointers out first behave as they always did; a call that is
neither raises TypeError showing both conventions, before any launch."""
import pytest

import pyrms
from tests.ops.conftest import HIDDEN, ROWS
from tests.ops.test_fake_end_to_end import RMS_ROWS_ARGS, f32

# cuda_src/layer_norm.cu, layer_norm_kernel: out, input, weight, bias, mean, rstd, epsilon, hidden, input_stride,
# out_stride
LAYER_NORM_ARGS = ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "f32", "i32", "i64", "i64")


class EveryKernel(dict):
    """FakeDriver.kernel_params that reads every kernel's arguments as ``kinds``: the kernels one op may pick for
    these operands (latency or not, aligned or not) share their parameter list."""

    def __init__(self, kinds):
        super().__init__()
        self.kinds = kinds

    def get(self, name, default=None):
        return self.kinds


def launched(fake, call):
    """(what ``call()`` returned, the one launch it made)."""
    fake.launches.clear()
    result = call()
    assert len(fake.launches) == 1
    return result, fake.launches[0]


def test_rms_norm_input_first_launches_what_out_first_launches(arrays):
    fake, x, w, _, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    result, expected = launched(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5))
    assert result is y and expected.args[:5] == (y.ptr, x.ptr, w.ptr, 0, f32(1e-5))
    for call in (lambda: pyrms.rms_norm(x, w, 1e-5, out=y), lambda: pyrms.rms_norm(x, w, eps=1e-5, out=y),
                 lambda: pyrms.rms_norm(input=x, weight=w, eps=1e-5, out=y),
                 lambda: pyrms.rms_norm(out=y, input=x, weight=w, epsilon=1e-5)):  # out first by name
        result, launch = launched(fake, call)
        assert result is y and launch == expected
    with pyrms.Tensor.empty((ROWS,), "float32") as rstd:  # the saved statistics, in either convention
        _, expected = launched(fake, lambda: pyrms.rms_norm(y, x, w, 1e-5, rstd=rstd))
        result, launch = launched(fake, lambda: pyrms.rms_norm(x, w, 1e-5, out=y, rstd=rstd))
        assert result is y and launch == expected and launch.args[:5] == (y.ptr, x.ptr, w.ptr, rstd.ptr, f32(1e-5))


def test_rms_norm_input_first_allocates_its_output_and_defaults_eps(arrays):
    fake, x, w, _, _ = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    y, launch = launched(fake, lambda: pyrms.rms_norm(x, w))
    with y:
        assert isinstance(y, pyrms.Tensor) and (y.shape, y.dtype) == (x.shape, x.dtype)
        assert launch.args[:5] == (y.ptr, x.ptr, w.ptr, 0, f32(1e-6))  # pyrms.torch.rms_norm's default eps
    z, launch = launched(fake, lambda: pyrms.rms_norm(x, None, 0.5))  # no weight: a null pointer
    with z:
        assert launch.args[:5] == (z.ptr, x.ptr, 0, 0, f32(0.5))


def test_layer_norm_input_first_launches_what_out_first_launches(arrays):
    fake, x, w, b, y = arrays
    fake.kernel_params = EveryKernel(LAYER_NORM_ARGS)
    result, expected = launched(fake, lambda: pyrms.layer_norm(y, x, w, b, 1e-3))
    assert result is y and expected.args[:7] == (y.ptr, x.ptr, w.ptr, b.ptr, 0, 0, f32(1e-3))
    for call in (lambda: pyrms.layer_norm(x, w, b, 1e-3, out=y),
                 lambda: pyrms.layer_norm(x, w, bias=b, eps=1e-3, out=y),
                 lambda: pyrms.layer_norm(out=y, input=x, weight=w, bias=b, epsilon=1e-3)):
        result, launch = launched(fake, call)
        assert result is y and launch == expected
    z, launch = launched(fake, lambda: pyrms.layer_norm(x, w))  # no bias; pyrms.torch.layer_norm's default eps
    with z:
        assert (z.shape, launch.args[:7]) == (x.shape, (z.ptr, x.ptr, w.ptr, 0, 0, 0, f32(1e-5)))


def test_raw_pointers_out_first_are_unchanged(arrays):
    fake, x, w, b, y = arrays
    fake.kernel_params = EveryKernel(RMS_ROWS_ARGS)
    for call in (lambda: pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN),
                 lambda: pyrms.rms_norm(y.ptr, x.ptr, w.ptr, epsilon=1e-5, num_tokens=ROWS, hidden_size=HIDDEN),
                 lambda: pyrms.rms_norm(out=y.ptr, input=x.ptr, weight=w.ptr, epsilon=1e-5, num_tokens=ROWS,
                                        hidden_size=HIDDEN)):
        result, launch = launched(fake, call)
        assert type(result) is int and result == y.ptr
        assert launch.args == (y.ptr, x.ptr, w.ptr, 0, f32(1e-5), HIDDEN, HIDDEN, HIDDEN)
    fake.kernel_params = EveryKernel(LAYER_NORM_ARGS)
    for call in (lambda: pyrms.layer_norm(y.ptr, x.ptr, w.ptr, None, 1e-5, ROWS, HIDDEN),
                 lambda: pyrms.layer_norm(out=y.ptr, input=x.ptr, weight=w.ptr, bias=None, epsilon=1e-5,
                                          num_tokens=ROWS, hidden_size=HIDDEN)):
        result, launch = launched(fake, call)
        assert result == y.ptr and launch.args == (y.ptr, x.ptr, w.ptr, 0, 0, 0, f32(1e-5), HIDDEN, HIDDEN, HIDDEN)


RMS_NORM_CALLS = ("input first (arrays): pyrms.rms_norm(input, weight, eps=1e-06, out=None), returning out (a new "
                  "pyrms.Tensor for out=None); out first (vLLM's order; raw device pointers or arrays): "
                  "pyrms.rms_norm(out, input, weight, epsilon, num_tokens, hidden_size)")
LAYER_NORM_CALLS = ("input first (arrays): pyrms.layer_norm(input, weight, bias=None, eps=1e-05, out=None), returning "
                    "out (a new pyrms.Tensor for out=None); out first (vLLM's order; raw device pointers or arrays): "
                    "pyrms.layer_norm(out, input, weight, bias, epsilon, num_tokens, hidden_size)")
POINTERS_FIRST = "given as raw device pointers (int) input first; raw pointers go out first, with epsilon and the sizes"
NOT_AN_OPERAND = ("{} must be a device pointer (int), a pyrms.Tensor, a torch tensor, or an object with "
                  "__cuda_array_interface__ or __dlpack__, got float 1e-05: out first, as epsilon is given (eps= is "
                  "input first's)")
OUT_BESIDE_POSITIONAL = ("out= is given beside epsilon and an argument in eps's place: out first takes its operands "
                         "positionally, out first, or all by name (out=, input=, weight={}), and never eps")

WRONG = [  # (call of x, w, b, y, what the message says before the calls)
    (lambda x, w, b, y: pyrms.rms_norm(x, w, eps=1e-5, epsilon=1e-5), NOT_AN_OPERAND.format('weight')),
    (lambda x, w, b, y: pyrms.rms_norm(y, x, w, 1e-5, out=y), OUT_BESIDE_POSITIONAL.format("")),
    (lambda x, w, b, y: pyrms.rms_norm(x, w, epsilon=1e-5), "weight missing before epsilon"),
    (lambda x, w, b, y: pyrms.rms_norm(out=y, input=x, epsilon=1e-5), "weight missing before epsilon"),
    (lambda x, w, b, y: pyrms.rms_norm(x), "weight missing (pass None for none)"),
    # raw pointers input first: none of them may be taken for a launch, fast path included
    (lambda x, w, b, y: pyrms.rms_norm(y.ptr, x.ptr, w.ptr), f"input, weight {POINTERS_FIRST}"),
    (lambda x, w, b, y: pyrms.rms_norm(x.ptr, w.ptr, None), f"input, weight {POINTERS_FIRST}"),
    (lambda x, w, b, y: pyrms.rms_norm(x.ptr, w.ptr, eps=1e-5, num_tokens=ROWS, hidden_size=HIDDEN),
     f"input, weight {POINTERS_FIRST}"),
    (lambda x, w, b, y: pyrms.rms_norm(x.ptr, w.ptr, 1e-5, out=y.ptr), f"out, input, weight {POINTERS_FIRST}"),
    (lambda x, w, b, y: pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN, out=y),
     OUT_BESIDE_POSITIONAL.format("")),
    (lambda x, w, b, y: pyrms.layer_norm(x, w, eps=1e-5, epsilon=1e-5), NOT_AN_OPERAND.format('bias')),
    (lambda x, w, b, y: pyrms.layer_norm(y, x, w, b, 1e-5, out=y), OUT_BESIDE_POSITIONAL.format(", bias=")),
    (lambda x, w, b, y: pyrms.layer_norm(y, x, w, epsilon=1e-5), "bias missing before epsilon"),
    (lambda x, w, b, y: pyrms.layer_norm(y.ptr, x.ptr, w.ptr, None), f"input, weight, bias {POINTERS_FIRST}"),
]


@pytest.mark.parametrize("call, problem", WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_a_call_of_neither_convention_shows_both_and_launches_nothing(arrays, call, problem):
    fake, x, w, b, y = arrays
    with pytest.raises(TypeError) as info:
        call(x, w, b, y)
    message = str(info.value)
    op, calls = ("layer_norm", LAYER_NORM_CALLS) if "pyrms.layer_norm" in message else ("rms_norm", RMS_NORM_CALLS)
    assert message == f"pyrms.{op}: {problem}. It is called {calls}"
    assert fake.launches == []


@pytest.mark.parametrize("call, name", [
    (lambda x, w, b, y: pyrms.rms_norm(x, w, 1e-5, eps=1e-5), "eps"),
    (lambda x, w, b, y: pyrms.rms_norm(y.ptr, x.ptr, w.ptr, 1e-5, ROWS, HIDDEN, eps=1e-6), "eps"),  # the hot path's
    (lambda x, w, b, y: pyrms.rms_norm(y, input=x, weight=w, epsilon=1e-5), "input"),
    (lambda x, w, b, y: pyrms.layer_norm(x, w, b, bias=b), "bias"),
])
def test_an_argument_given_twice_is_pythons_own_type_error(arrays, call, name):
    fake, x, w, b, y = arrays
    with pytest.raises(TypeError, match=f"got multiple values for argument '{name}'"):
        call(x, w, b, y)
    assert fake.launches == []
