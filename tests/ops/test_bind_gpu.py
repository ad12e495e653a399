"""pyrms.bind and the raw-pointer calls' bound last call on the GPU: a bound launch computes bit for bit what
the call computes, on data written after binding, on its own stream and another, from another thread, and
captured in a CUDA graph; a repeated raw-pointer call (launched through its bound launch from the third call)
and a repeated pyrms.torch.rms_norm give the bits of a first call."""
import threading

import numpy as np
import pytest

import pyrms
from pyrms import driver
from tests.support.testing import bits

pytestmark = pytest.mark.gpu

HIDDEN = 4096
SHAPES = (1, 3, 300)  # the few-row kernels, and the many-row one


def _data(rng, rows, dtype=np.float16):
    return rng.uniform(-2, 2, (rows, HIDDEN)).astype(dtype)


def _ops(rows):
    """(name, how many [rows, HIDDEN] operands the op takes, its call on them and w, b: the op's bound outputs
    are the operands it writes: out (index 0) or, for the fused add, input and residual in place)."""
    return [
        ("rms_norm", 2, lambda o, x, w, b, **k: pyrms.rms_norm(o, x, w, 1e-6, rows, HIDDEN, dtype="float16", **k)),
        ("rms_norm no PDL", 2,
         lambda o, x, w, b, **k: pyrms.rms_norm(o, x, w, 1e-6, rows, HIDDEN, dtype="float16", pdl=False, **k)),
        ("fused_add_rms_norm", 2,
         lambda x, r, w, b, **k: pyrms.fused_add_rms_norm(x, r, w, 1e-6, rows, HIDDEN, dtype="float16", **k)),
        ("layer_norm", 2,
         lambda o, x, w, b, **k: pyrms.layer_norm(o, x, w, b, 1e-5, rows, HIDDEN, dtype="float16", **k)),
    ]


def _bound_of(call, *args):
    """The BoundLaunch of ``call(*args)``, a call of one op (pyrms.bind's work on a ready call)."""
    from pyrms.ops._bind import bound_call

    return bound_call(lambda: call(*args))


@pytest.mark.parametrize("rows", SHAPES)
def test_a_bound_launch_computes_what_the_call_computes(rng, rows):
    w, b = (rng.uniform(-1, 1, HIDDEN).astype(np.float16) for _ in range(2))
    with pyrms.Tensor.from_numpy(w) as dw, pyrms.Tensor.from_numpy(b) as db, driver.Stream() as other:
        for name, count, call in _ops(rows):
            bound_ops = [pyrms.Tensor.empty((rows, HIDDEN), "float16") for _ in range(count)]
            fresh = [pyrms.Tensor.empty((rows, HIDDEN), "float16") for _ in range(count)]
            ptrs = [t.ptr for t in bound_ops]
            bound = _bound_of(call, *ptrs, dw.ptr, db.ptr)
            for launch_on in (lambda: bound(), lambda: bound(other), lambda: _in_thread(bound)):
                data = [_data(rng, rows) for _ in range(count)]  # written after binding: read at every launch
                for t, d in zip(bound_ops + fresh, data + data):
                    t.copy_from_numpy(d)
                launch_on()
                call(*(t.ptr for t in fresh), dw.ptr, db.ptr)
                driver.synchronize()
                for got, want in zip(bound_ops, fresh):
                    assert np.array_equal(bits(got.to_numpy()), bits(want.to_numpy())), name
            for t in bound_ops + fresh:
                t.close()


def _in_thread(bound):
    """bound() from a new thread (no context current there); its exception re-raised here."""
    failures = []
    thread = threading.Thread(target=lambda: _catch(bound, failures))
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


def _catch(fn, failures):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - re-raised by the caller
        failures.append(exc)


def test_pyrms_bind_by_function_and_its_result(rng):
    x = _data(rng, 5)
    w = rng.uniform(-1, 1, HIDDEN).astype(np.float16)
    with pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(w) as dw:
        bound = pyrms.bind(pyrms.rms_norm, dx, dw, 1e-6)
        with pyrms.rms_norm(dx, dw, 1e-6) as want, bound.result as got:
            got.fill_bytes(0xFF)
            bound()
            driver.synchronize()
            assert np.array_equal(bits(got.to_numpy()), bits(want.to_numpy()))


def test_a_bound_launch_in_a_cuda_graph(rng):
    x = _data(rng, 3)
    w = rng.uniform(-1, 1, HIDDEN).astype(np.float16)
    with pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(w) as dw, \
            pyrms.Tensor.empty((3, HIDDEN), "float16") as out, pyrms.Tensor.empty((3, HIDDEN), "float16") as want, \
            driver.Stream() as stream:
        bound = pyrms.bind(pyrms.rms_norm, out, dx, dw, 1e-6, stream=stream)
        pyrms.rms_norm(want, dx, dw, 1e-6)
        with driver.capture(stream) as graph:
            bound()
        out.fill_bytes(0xFF)
        graph.launch(stream)
        stream.synchronize()
        graph.close()
        assert np.array_equal(bits(out.to_numpy()), bits(want.to_numpy()))


@pytest.mark.parametrize("rows", SHAPES)
def test_repeated_raw_calls_give_a_first_calls_bits(rng, rows):
    w = rng.uniform(-1, 1, HIDDEN).astype(np.float16)
    data = [_data(rng, rows) for _ in range(5)]
    with pyrms.Tensor.from_numpy(w) as dw, pyrms.Tensor.empty((rows, HIDDEN), "float16") as x, \
            pyrms.Tensor.empty((rows, HIDDEN), "float16") as out:
        wants = []
        for d in data:  # first, so that no other call comes between the repeated ones below
            with pyrms.Tensor.from_numpy(d) as fresh, pyrms.rms_norm(fresh, dw, 1e-6) as want:
                wants.append(want.to_numpy())
        for step, (d, want) in enumerate(zip(data, wants)):  # the third call on launches through the bound launch
            x.copy_from_numpy(d)
            pyrms.rms_norm(out.ptr, x.ptr, dw.ptr, 1e-6, rows, HIDDEN, dtype="float16")
            assert np.array_equal(bits(out.to_numpy()), bits(want)), step


def test_repeated_pyrms_torch_calls_give_a_first_calls_bits():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import pyrms.torch as pt

    gen = torch.Generator(device="cuda").manual_seed(5)
    w = torch.rand(HIDDEN, device="cuda", generator=gen, dtype=torch.bfloat16)
    data = [(torch.rand((1, HIDDEN), device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16) for _ in range(5)]
    wants = [pt.rms_norm(d, w, 1e-6) for d in data]  # first, so that no other call comes between the repeated ones
    x = torch.empty_like(data[0])
    for step, (d, want) in enumerate(zip(data, wants)):  # each output freed before the next call: the allocator
        x.copy_(d)                                       # hands its memory back, and the call repeats
        got = pt.rms_norm(x, w, 1e-6)
        assert torch.equal(got, want), step
        del got
