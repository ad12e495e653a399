"""pyrms.rms_norm on the GPU: bitwise equality with the twin on every alignment, size and stride.

The layouts are tests.support.case_matrix's GPU axes. Every case draws fresh random inputs, poisons the
output, surrounds every operand with guard bands, and then compares whole allocations bit for bit:
the rows against the twin, everything else (guards, the gaps between strided rows, the inputs)
against what was there before.
"""
import subprocess
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import pyrms
from pyrms import driver, dtypes
from tests.support import case_matrix
from tests.support.testing import allocate, bits, check_case
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from tests.support.child_env import child_env

pytestmark = pytest.mark.gpu



@pytest.mark.parametrize("case", [pytest.param(c, id=f"{axis}-{c}") for axis in case_matrix.GPU_AXES
                                  for c in case_matrix.gpu("rms_norm", axis)])
def test_every_layout_of_the_case_matrix(rng, case):
    """Each pointer at every misalignment, all misaligned differently, the case matrix's hidden sizes, strided
    rows, more than 65535 rows, the options and in place, each kernel for few and for many rows."""
    check_case(rng, case)


def test_seed_worked_example():
    x = np.array([[1, 2, 3, 4, 5], [2, 2, 2, 2, 2]], dtype=np.float32)
    w = np.full(5, 2.0, dtype=np.float32)
    with pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(w) as dw, \
            pyrms.Tensor.empty((2, 5), "float32") as dout:
        pyrms.rms_norm(dout, dx, dw, 0.0, 2, 5)
        got = dout.to_numpy()
    np.testing.assert_allclose(got[0], 2 * np.arange(1, 6) / np.sqrt(11), rtol=1e-6)
    assert np.array_equal(got[1], np.full(5, 2.0, np.float32))
    assert np.array_equal(got, rms_twin.rms_norm_twin(x, w, 0.0, block=32))


def test_batch_invariance(rng):
    x = rng.uniform(-2, 2, (64, 5125)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-1, 1, 5125).astype(ml_dtypes.bfloat16)
    with pyrms.Tensor.from_numpy(x) as dx, pyrms.Tensor.from_numpy(w) as dw, \
            pyrms.Tensor.empty((64, 5125), "bfloat16") as dout:
        pyrms.rms_norm(dout, dx, dw, 1e-6, 64, 5125)
        batch = dout.to_numpy()
        for r in (0, 31, 63):
            single = pyrms.Tensor.empty((1, 5125), "bfloat16")
            pyrms.rms_norm(single, dx.view(r * 5125, (1, 5125), (5125, 1)), dw, 1e-6, 1, 5125)
            assert np.array_equal(bits(single.to_numpy()[0]), bits(batch[r]))
            single.close()


def test_two_streams_at_once(rng):
    a = allocate(rng, "bfloat16", 4096, 4096)
    b = allocate(rng, "bfloat16", 4096, 4096)
    w = allocate(rng, "bfloat16", 1, 4096)
    outs = [allocate(rng, "bfloat16", 4096, 4096, poison=True) for _ in range(2)]
    with pyrms.Stream() as s1, pyrms.Stream() as s2:
        for _ in range(3):
            pyrms.rms_norm(outs[0].ptr, a.ptr, w.ptr, 1e-5, 4096, 4096, stream=s1)
            pyrms.rms_norm(outs[1].ptr, b.ptr, w.ptr, 1e-5, 4096, 4096, stream=s2)
        s1.synchronize()
        s2.synchronize()
    for src, out in zip((a, b), outs):
        want = rms_twin.rms_norm_twin(src.values(), w.values()[0], 1e-5, block=rms_plan.plan_rms_norm("bfloat16", 4096).block)
        got = out.download()[out.offset:out.offset + 4096 * 4096].reshape(4096, 4096)
        assert np.array_equal(bits(got), bits(want))
    for o in (a, b, w, *outs):
        o.close()


def test_threads_each_with_a_stream(rng):
    x = allocate(rng, "float16", 256, 1000)
    w = allocate(rng, "float16", 1, 1000)
    want = rms_twin.rms_norm_twin(x.values(), w.values()[0], 1e-5, block=rms_plan.plan_rms_norm("float16", 1000).block)
    outs = [allocate(rng, "float16", 256, 1000, poison=True) for _ in range(4)]
    errors = []

    def work(out):
        try:
            with pyrms.Stream() as s:
                for _ in range(50):
                    pyrms.rms_norm(out.ptr, x.ptr, w.ptr, 1e-5, 256, 1000, dtype="float16", stream=s)
                s.synchronize()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for out in outs:
        assert np.array_equal(bits(out.download()[out.offset:out.offset + 256 * 1000].reshape(256, 1000)), bits(want))
    for o in (x, w, *outs):
        o.close()


def test_torch_tensors_through_cuda_array_interface():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    gen = torch.Generator(device="cuda").manual_seed(7)
    for torch_dtype, name in ((torch.float16, "float16"), (torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        x = torch.rand((33, 4097), device="cuda", generator=gen, dtype=torch.float32).to(torch_dtype) * 4 - 2
        w = torch.rand(4097, device="cuda", generator=gen).to(torch_dtype)
        out = torch.empty_like(x)
        if torch_dtype is torch.bfloat16:  # PyTorch exports no bfloat16 typestr: pass 16-bit views
            pyrms.rms_norm(out.view(torch.int16), x.view(torch.int16), w.view(torch.int16), 1e-6, 33, 4097,
                           dtype="bfloat16", round_once=True)
        else:
            pyrms.rms_norm(out, x, w, 1e-6, 33, 4097, round_once=True)
        torch.cuda.synchronize()
        ref = torch.nn.functional.rms_norm(x.double(), (4097,), w.double(), eps=1e-6)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err < {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6}[name], (name, err)
        host_x = x.view(torch.int16).cpu().numpy().view(dtypes.get(name).numpy) if name == "bfloat16" else x.cpu().numpy()
        host_w = w.view(torch.int16).cpu().numpy().view(dtypes.get(name).numpy) if name == "bfloat16" else w.cpu().numpy()
        host_out = out.view(torch.int16).cpu().numpy().view(dtypes.get(name).numpy) if name == "bfloat16" else out.cpu().numpy()
        vec = dtypes.get(name).vec_elems  # rows of 4097 elements start at every phase in turn
        twin = rms_twin.rms_norm_twin(host_x, host_w, 1e-6, block=rms_plan.plan_rms_norm(name, 4097).block,
                                       row_phases=[(r * 4097) % vec for r in range(33)], round_once=True)
        assert np.array_equal(bits(host_out), bits(twin))


def test_torch_stream_and_strided_slice():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    big = torch.randn((16, 5130), device="cuda", dtype=torch.float16)
    x = big[:, 3:3 + 5120]  # row stride 5130, base 3 elements past a boundary
    w = torch.randn(5120, device="cuda", dtype=torch.float16)
    out = torch.full((16, 5120), float("nan"), device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        pyrms.rms_norm(out, x, w, 1e-5, 16, 5120, stream=s)
    s.synchronize()
    twin = rms_twin.rms_norm_twin(x.cpu().numpy(), w.cpu().numpy(), 1e-5, block=rms_plan.plan_rms_norm("float16", 5120).block,
                                   row_phases=[(3 + 5130 * r) % 8 for r in range(16)])
    assert np.array_equal(bits(out.cpu().numpy()), bits(twin))


def test_seed_kernel_close_to_reference(rng):
    x = allocate(rng, "bfloat16", 5, 5120, low=0.2, high=1.0)
    w = allocate(rng, "bfloat16", 1, 5120, low=-0.02, high=0.5)
    out = allocate(rng, "bfloat16", 5, 5120, poison=True)
    pyrms.seed_rms_norm(out.ptr, x.ptr, w.ptr, 1e-5, 5, 5120)
    driver.synchronize()
    got = out.download()[out.offset:out.offset + 5 * 5120].reshape(5, 5120).astype(np.float64)
    ref = rms_twin.rms_norm_ref(x.values(), w.values()[0], 1e-5)
    assert np.abs(got - ref).max() < 4e-3
    for o in (x, w, out):
        o.close()


def test_demo_runs_and_agrees_with_cpu():
    env = child_env()
    for kernel in ("seed", "pyrms"):
        result = subprocess.run([sys.executable, "-m", "pyrms.demo", "--seed", "42", "--kernel", kernel],
                                capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[:3] == ["-------------main-------------", "-------------launch kernel-------------", "VEC_SIZE = 8"]
        # Exactly the C++ program's 38 lines (3 + 5 x 7) on stdout; the summary goes to stderr.
        assert len(lines) == 38 and sum(line.startswith("GPU row") for line in lines) == 5
        summary = [line for line in result.stderr.splitlines() if line.startswith("max |GPU - CPU|")]
        assert len(summary) == 1, result.stderr
        max_diff = float(summary[0].split("=")[1].split()[0])
        assert max_diff < 0.01, summary[0]
