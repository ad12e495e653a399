"""pyrms.rms_norm_backward and pyrms.layer_norm_backward on the GPU.

Bitwise equality with the twin (pyrms.reference.norm_backward_twin) on every alignment, size and
stride (tests.support.case_matrix's GPU axes), through tests.support.testing's guarded, poisoned operands; dweight/dbias bitwise
identical across runs and rows_per_block settings; the pooled (stream-ordered) and caller-owned
workspaces, also under graph capture; and the
gradients against PyTorch autograd in float64 on the GPU.
"""
import threading
from dataclasses import replace

import numpy as np
import pytest

import pyrms
from tests.support import case_matrix
from tests.support.testing import allocate, bits, check_case, check_norm_backward as run_case, phases
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
OPS = {"rms_norm": False, "layer_norm": True}


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{axis}-{c}") for family in case_matrix.BACKWARD
                                  for axis in case_matrix.GPU_AXES for c in case_matrix.gpu(family, axis)])
def test_every_layout_of_the_case_matrix(rng, case):
    """Each pointer at every misalignment (18 rows: two chunks), all misaligned differently, GUIDE.md's
    hidden sizes, strided rows, more than 65535 rows, the options (Gemma, fp32 gradients), in place
    over either input."""
    check_case(rng, case)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("hidden", [12272, 12280, 12288, 24560])
def test_column_sums_just_under_the_default_shared_limit(rng, op, hidden):
    """fp32 gradients whose shared column sums are a little under 48 KiB: the kernel's static shared
    memory pushes the launch past the default limit (the randomized check's seed 2026, case 237)."""
    run_case(rng, "float32", 3, hidden, layer_norm=OPS[op], grad_dtype="float32")
    run_case(rng, "bfloat16", 3, hidden, layer_norm=OPS[op], grad_dtype="float32")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("hidden", [7, 5125, 16384])
def test_parameter_gradients_bitwise_identical_across_runs_and_rows_per_block(op, dtype, hidden):
    # 10 chunks, the last one partial; planned: one row per block (the terms summed by kernel 2). At
    # hidden 7, one row more than bwd_plan.BACKWARD_FEW_ROWS: planned a chunk per block.
    rows = 150 if hidden != 7 else bwd_plan.BACKWARD_FEW_ROWS + 1
    layout = dict(layer_norm=OPS[op], offsets={"input": 1, "grad_weight": 2}, strides={"grad_output": hidden + 3})
    results = []
    for rows_per_block in (None, 16, 1, 32, 48, 64, 160, 1600, 1, None):  # None: the planned launch shape
        # The same seed each time: the same inputs; every launch is also checked against the twin.
        results.append(run_case(np.random.default_rng(7), dtype, rows, hidden, rows_per_block=rows_per_block,
                                **layout))
    for other in results[1:]:
        for name, got in other.items():
            assert np.array_equal(bits(got), bits(results[0][name])), name


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [8, 64, 1000, 4096, 5120, 8192, 16384])
def test_staged_kernel_bitwise_at_every_rows_per_block(op, dtype, hidden):
    """16-byte aligned operands of whole-vector strides take the staged kernel (norm_backward_staged) where
    it is planned: bitwise the twin, and the parameter gradients bitwise the same, at every rows_per_block
    (chunks split over blocks, several chunks per block, a partial last chunk and block), with and without
    a weight, in place, Gemma and fp32 gradients."""
    layer_norm = OPS[op]
    rng = np.random.default_rng(11)
    rows = 150
    results = []
    for rows_per_block in (None, 16, 1, 32, 48, 160, 1600):
        results.append(run_case(np.random.default_rng(5), dtype, rows, hidden, layer_norm=layer_norm,
                                rows_per_block=rows_per_block))
    for other in results[1:]:
        for name, got in other.items():
            assert np.array_equal(bits(got), bits(results[0][name])), name
    run_case(rng, dtype, bwd_plan.BACKWARD_STAGED_FEW_ROWS + 333, hidden, layer_norm=layer_norm)  # planned: chunks
    run_case(rng, dtype, 37, hidden, layer_norm=layer_norm, in_place="grad_output", rows_per_block=16)
    run_case(rng, dtype, 37, hidden, layer_norm=layer_norm, in_place="input", rows_per_block=16)
    run_case(rng, dtype, 37, hidden, layer_norm=layer_norm, weight="none", rows_per_block=16)
    run_case(rng, dtype, 37, hidden, layer_norm=layer_norm, grad_dtype="float32", rows_per_block=32)
    if layer_norm:
        run_case(rng, dtype, 37, hidden, layer_norm=True, weight="none", grad_bias=False, rows_per_block=16)
    else:
        run_case(rng, dtype, 37, hidden, gemma=True, rows_per_block=16)


@pytest.fixture
def forced_staged(monkeypatch):
    """force(threads, stages, held=None, **fields): every backward plan made from now on takes this staged
    launch shape (where the plan has a staged kernel at all; held: NormBackwardPlan.staged_shape's; fields: the
    plan's deepen and spread); the prepared launches are forgotten before and after."""
    from pyrms import driver
    from pyrms.ops._norm_backward import prepared

    original = bwd_plan.plan_norm_backward

    def force(threads, stages, held=None, **fields):
        def forced(*args, **kwargs):
            p = original(*args, **kwargs)
            return replace(p.staged_shape(threads, stages, held), **fields) if p.stages else p
        monkeypatch.setattr(bwd_plan, "plan_norm_backward", forced)
        prepared._prepared.forget(driver.current_device())

    yield force
    monkeypatch.setattr(bwd_plan, "plan_norm_backward", original)
    prepared._prepared.forget(driver.current_device())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("hidden", [64, 1000, 5120])
@pytest.mark.parametrize("shape", [(64, 2), (128, 3), (512, 2), (96, 4)])
def test_staged_kernel_bitwise_at_every_launch_shape(forced_staged, op, dtype, hidden, shape):
    """The staged kernel's threads and stages change no bit: each launch against the twin."""
    threads, stages = shape
    p = bwd_plan.plan_norm_backward(dtype, hidden, centered=OPS[op])
    if p.staged_shared_bytes(stages) > bwd_plan.STAGED_SHARED_LIMIT:
        pytest.skip("the stages do not fit")
    forced_staged(threads, stages)
    rng = np.random.default_rng(3)
    for rows, rows_per_block in ((150, 16), (150, 48), (37, 1), (bwd_plan.BACKWARD_STAGED_FEW_ROWS + 333, None)):
        run_case(rng, dtype, rows, hidden, layer_norm=OPS[op], rows_per_block=rows_per_block)
    run_case(rng, dtype, 37, hidden, layer_norm=OPS[op], weight="none", rows_per_block=32, in_place="input")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 1000, 4096, 5120, 8192])
def test_deeper_stages_give_the_same_bits(forced_staged, op, dtype, hidden):
    """A staged launch of few blocks per multiprocessor takes more stages (NormBackwardPlan.staged_launch): the
    same bits as the plan's stages, each launch against the twin, with and without a weight and in place."""
    p = bwd_plan.plan_norm_backward(dtype, hidden, centered=OPS[op])
    if not p.stages or p.staged_launch(16, 10, 132)[0] == p.stages:  # 150 rows in blocks of 16: deepened below
        pytest.skip("no staged kernel at this size, or no room for another stage")
    results = []
    for fields in ({}, {"deepen": False}):
        forced_staged(p.threads, p.stages, None, **fields)
        for rows, rows_per_block, weight in ((150, 16, None), (150, 48, None), (70, 32, "none")):
            got = run_case(np.random.default_rng(rows), dtype, rows, hidden, layer_norm=OPS[op],
                           rows_per_block=rows_per_block, **({} if weight is None else {"weight": weight}))
            results.append(((rows, rows_per_block), got))
        run_case(np.random.default_rng(2), dtype, 37, hidden, layer_norm=OPS[op], in_place="input", rows_per_block=16)
    for (case, deep), (_, fixed) in zip(results[:3], results[3:]):
        for name, value in deep.items():
            assert np.array_equal(bits(value), bits(fixed[name])), (name, case)


# The variants by the planes of column sums they hold: (op, the backward's options, planes).
HELD_VARIANTS = {"rms_norm": ("rms_norm", {}, 1), "rms_norm-bias": ("rms_norm", {"bias": True}, 2),
                 "layer_norm-weightless": ("layer_norm", {"weight": "none"}, 1), "layer_norm": ("layer_norm", {}, 2),
                 "layer_norm-fp32-weight": ("layer_norm", {"weight": "float32"}, 2)}


@pytest.mark.parametrize("variant", HELD_VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [64, 1000, 4096, 5120, 6144])
def test_column_sums_held_in_registers_give_the_shared_memory_bits(forced_staged, variant, dtype, hidden):
    """The staged kernel's chunk sums in registers (HELD, where the plan holds them) and in shared memory (held
    0): the same bits, each launch against the twin, over chunk splits, a partial last chunk and one row per
    block, for one plane (RMSNorm's dweight, LayerNorm's dbias alone) and two (dweight and dbias)."""
    op, options, planes = HELD_VARIANTS[variant]
    if options.get("weight") == "float32" and dtype == "float32":
        pytest.skip("an fp32 weight goes beside bf16 or fp16 rows")
    fp32_weight = options.get("weight") == "float32"
    p = bwd_plan.plan_norm_backward(dtype, hidden, centered=OPS[op], weight=options.get("weight") != "none",
                                    grad_bias=options.get("bias"), weight_dtype="float32" if fp32_weight else None,
                                    grad_dtype="float32" if fp32_weight else None)
    assert p.params == planes
    if not p.held:
        pytest.skip(f"the plan keeps these sums in shared memory (held {p.held})")
    results = []
    for held in (None, 0):
        forced_staged(p.threads, p.stages, held)
        for rows, rows_per_block in ((150, 16), (150, 48), (37, 1)):
            got = run_case(np.random.default_rng(rows), dtype, rows, hidden, layer_norm=OPS[op],
                           rows_per_block=rows_per_block, **options)
            results.append((held, rows, rows_per_block, got))
    half = len(results) // 2
    for (_, rows, per_block, held_sums), (_, _, _, shared_sums) in zip(results[:half], results[half:]):
        for name, got in held_sums.items():
            assert np.array_equal(bits(got), bits(shared_sums[name])), (name, rows, per_block)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 769, 5125, 65537])
def test_layer_norm_without_bias_gives_the_same_grad_input_and_grad_weight(dtype, hidden):
    # grad_bias=None: its column sum is skipped; grad_input and grad_weight are the twin's, bit for bit.
    for offsets in ({}, {"grad_output": 1}, {"grad_weight": 1}):
        with_bias = run_case(np.random.default_rng(hidden), dtype, 33, hidden, layer_norm=True, offsets=offsets)
        without = run_case(np.random.default_rng(hidden), dtype, 33, hidden, layer_norm=True, offsets=offsets,
                           grad_bias=False)
        assert set(without) == {"grad_input", "grad_weight"}
        for name, got in without.items():
            assert np.array_equal(bits(got), bits(with_bias[name])), name


@pytest.mark.parametrize("op", OPS)
def test_own_workspace_guards_stay_untouched(rng, op):
    for hidden, rows in ((5125, 40), (16384, 33), (65537, 3)):
        run_case(rng, "bfloat16", rows, hidden, layer_norm=OPS[op], own_workspace=True)


def test_pooled_workspace_is_kept_for_reuse_and_released(rng):
    for rows, hidden in ((3, 64), (500, 4096), (7, 64), (2000, 5125)):
        run_case(rng, "float16", rows, hidden)
    # Freed on its stream after each call, but kept by the pool for reuse (below KEEP_BYTES).
    assert pyrms.ops._workspace.cached_bytes() >= pyrms.backward_workspace_bytes(2000, 5125)
    pyrms.release_workspaces()
    assert pyrms.ops._workspace.cached_bytes() == 0
    run_case(rng, "float16", 40, 5125, layer_norm=True)


def test_streams_closed_after_use_leave_no_workspace():
    # A stream per request, as a server does: nothing outlives the streams (the first design kept a
    # workspace per stream handle).
    rng = np.random.default_rng(3)
    rows, hidden = 40, 5125
    ops = [allocate(rng, "bfloat16", r, hidden) for r in (rows, rows, rows, 1, 1)]
    pyrms.release_workspaces()
    for _ in range(50):
        with pyrms.Stream() as s:
            pyrms.rms_norm_backward(ops[0].ptr, ops[3].ptr, ops[1].ptr, ops[2].ptr, ops[4].ptr, 1e-5, rows, hidden,
                                    stream=s)
            s.synchronize()
    pyrms.release_workspaces()
    assert pyrms.ops._workspace.cached_bytes() == 0
    assert pyrms.ops._workspace.KEEP_BYTES > 0 and len(pyrms.ops._workspace.pools()) == 1
    for o in ops:
        o.close()


@pytest.mark.parametrize("op", OPS)
def test_captured_backward_owns_its_workspace(rng, op):
    # No workspace=: the allocation and the free become the graph's memory nodes.
    layer_norm = OPS[op]
    rows, hidden = 40, 5125
    dy, x, w = allocate(rng, "bfloat16", rows, hidden), allocate(rng, "bfloat16", rows, hidden), allocate(rng, "bfloat16", 1, hidden)
    p = bwd_plan.plan_norm_backward("bfloat16", hidden, centered=layer_norm)
    # Rows of an odd hidden size start at varying phases: the twin needs each row's.
    want = bwd_twin.norm_backward_twin(dy.values(), x.values(), w.values()[0], 1e-5, block=p.block, fold=p.stats_fold,
                                        x_phases=phases(x), weight_phase=int(phases(w)[0]), chunk_rows=p.chunk_rows,
                                        centered=layer_norm)
    dx = allocate(rng, "bfloat16", rows, hidden, poison=True)
    params = [allocate(rng, "bfloat16", 1, hidden, poison=True) for _ in range(2 if layer_norm else 1)]
    with pyrms.Stream() as s:
        with pyrms.driver.capture(s) as graph:
            if layer_norm:
                pyrms.layer_norm_backward(dx.ptr, params[0].ptr, params[1].ptr, dy.ptr, x.ptr, w.ptr, 1e-5, rows,
                                          hidden, dtype="bfloat16", stream=s)
            else:
                pyrms.rms_norm_backward(dx.ptr, params[0].ptr, dy.ptr, x.ptr, w.ptr, 1e-5, rows, hidden,
                                        dtype="bfloat16", stream=s)
        for replay in range(3):
            for out in (dx, *params):
                out.upload(s)  # poison again: each replay must write every output
            graph.launch(s)
            s.synchronize()
            assert np.array_equal(bits(np.stack([dx.download()[dx.index(r)] for r in range(rows)])), bits(want[0])), replay
            for out, expected in zip(params, want[1:]):
                assert np.array_equal(bits(out.download()[out.index(0)]), bits(expected)), replay
        graph.close()
    for o in (dy, x, w, dx, *params):
        o.close()


def test_threads_each_with_a_stream_share_nothing(rng):
    rows, hidden = 300, 2000
    dy = allocate(rng, "bfloat16", rows, hidden)
    x = allocate(rng, "bfloat16", rows, hidden)
    w = allocate(rng, "bfloat16", 1, hidden)
    p = bwd_plan.plan_norm_backward("bfloat16", hidden)
    want_dx, want_dw = bwd_twin.norm_backward_twin(dy.values(), x.values(), w.values()[0], 1e-5, block=p.block,
                                                    fold=p.stats_fold, chunk_rows=p.chunk_rows)
    outs = [(allocate(rng, "bfloat16", rows, hidden, poison=True), allocate(rng, "bfloat16", 1, hidden, poison=True))
            for _ in range(4)]
    errors = []

    def work(dx, dw):
        try:
            with pyrms.Stream() as s:
                for _ in range(20):
                    pyrms.rms_norm_backward(dx.ptr, dw.ptr, dy.ptr, x.ptr, w.ptr, 1e-5, rows, hidden, stream=s)
                s.synchronize()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=out) for out in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for dx, dw in outs:
        got = dx.download()[dx.offset:dx.offset + rows * hidden].reshape(rows, hidden)
        assert np.array_equal(bits(got), bits(want_dx))
        assert np.array_equal(bits(dw.download()[dw.index(0)]), bits(want_dw))
    for o in (dy, x, w, *(a for out in outs for a in out)):
        o.close()


def _torch_case(torch, op, torch_dtype, name, rows, hidden, gemma, gen):
    """Strided, misaligned torch operands; pyrms's gradients and autograd's in float64 on the GPU."""
    def rand(*shape, scale=2.0, shift=-1.0):
        return (torch.rand(shape, device="cuda", generator=gen) * scale + shift).to(torch_dtype)

    def nans(dtype):
        return torch.full((hidden,), float("nan"), device="cuda", dtype=dtype)

    view = (lambda t: t.view(torch.int16)) if name == "bfloat16" else (lambda t: t)  # bf16 crosses as int16
    x = rand(rows, hidden + 9, scale=4, shift=-2)[:, 3:3 + hidden]  # row stride hidden + 9, base 3 elements in
    dy = rand(rows, hidden + 4)[:, 1:1 + hidden]
    w = rand(hidden + 1)[1:]
    dx = torch.full((rows, hidden), float("nan"), device="cuda", dtype=torch_dtype)
    params = 2 if op == "layer_norm" else 1
    grads32 = [nans(torch.float32) for _ in range(params)]  # fp32 parameter gradients
    grads = [nans(torch_dtype) for _ in range(params)]  # ... and in the dtype
    for out in (grads32, [view(g) for g in grads]):
        if op == "rms_norm":
            pyrms.rms_norm_backward(view(dx), out[0], view(dy), view(x), view(w), 1e-6, rows, hidden, dtype=name,
                                    gemma=gemma)
        else:
            pyrms.layer_norm_backward(view(dx), out[0], out[1], view(dy), view(x), view(w), 1e-6, rows, hidden,
                                      dtype=name)
    torch.cuda.synchronize()
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    if op == "rms_norm":
        y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * ((1 + w64) if gemma else w64)
    else:
        b64 = torch.zeros(hidden, dtype=torch.float64, device="cuda", requires_grad=True)
        y = torch.nn.functional.layer_norm(x64, (hidden,), w64, b64, eps=1e-6)
    y.backward(dy.double())
    got = {"dx": dx, "dw32": grads32[0], "dw": grads[0]}
    want = {"dx": x64.grad, "dw32": w64.grad, "dw": w64.grad}
    if op == "layer_norm":
        got.update(db32=grads32[1], db=grads[1])
        want.update(db32=b64.grad, db=b64.grad)
    return got, want


@pytest.mark.parametrize("op, gemma", [("rms_norm", False), ("rms_norm", True), ("layer_norm", False)])
@pytest.mark.parametrize("rows, hidden", [(64, 4097), (3, 8192), (70, 16384)])
def test_against_torch_autograd_in_float64(op, gemma, rows, hidden):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    gen = torch.Generator(device="cuda").manual_seed(rows + hidden)
    for torch_dtype, name in ((torch.float16, "float16"), (torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        got, want = _torch_case(torch, op, torch_dtype, name, rows, hidden, gemma, gen)
        dtype_tol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-5}[name]
        # dx and dweight in the dtype carry its rounding; fp32 dweight/dbias only fp32 arithmetic
        # (the inputs are exact in float64).
        tolerance = {"dx": dtype_tol, "dw": dtype_tol, "db": dtype_tol, "dw32": 2e-5, "db32": 2e-5}
        for key, value in got.items():
            err = ((value.double() - want[key]).norm() / want[key].norm()).item()
            assert err < tolerance[key], (op, name, key, err)
