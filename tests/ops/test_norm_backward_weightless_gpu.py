"""pyrms.rms_norm_backward and pyrms.layer_norm_backward without a weight (``weight=None``) on
the GPU.

Bitwise equality with the twin (pyrms.reference.norm_backward_twin with weight None) on every
alignment, size and stride, through tests.support.testing's guarded, poisoned operands; grad_input bitwise
equal to a weighted backward's with a 16-byte aligned weight of ones (the same trees); grad_input and
LayerNorm's grad_bias bitwise the same for every rows_per_block; nothing taken from the workspace pool
where nothing is summed, also under graph capture; and the gradients against PyTorch autograd in
float64.
"""
import numpy as np
import pytest

import pyrms
from pyrms import dtypes
from pyrms.ops import _workspace
from tests.support.testing import allocate, bits, check_norm_backward, phases
from pyrms.ops._norm_backward import plan as bwd_plan
from pyrms.ops._norm_backward import twin as bwd_twin

pytestmark = pytest.mark.gpu

DTYPES = ["bfloat16", "float16", "float32"]
HIDDEN = [1, 5, 7, 8, 9, 31, 769, 4096, 5120, 5125, 8192, 16384, 65536, 65537]
# (layer_norm, grad_bias): RMSNorm (nothing summed), LayerNorm with grad_bias (one sum), and without (none)
KINDS = {"rms_norm": (False, False), "layer_norm": (True, True), "layer_norm_no_grad_bias": (True, False)}


def run_case(rng, dtype, rows, hidden, kind, **options):
    layer_norm, grad_bias = KINDS[kind]
    return check_norm_backward(rng, dtype, rows, hidden, layer_norm=layer_norm, grad_bias=grad_bias, weight="none",
                               **options)


def names(kind):
    return ("grad_output", "input", "grad_input") + (("grad_bias",) if KINDS[kind][1] else ())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [7, 769, 5125])
def test_each_pointer_misaligned_by_every_element_offset(rng, kind, dtype, hidden):
    for name in names(kind):
        for off in range(dtypes.get(dtype).vec_elems):
            run_case(rng, dtype, 18, hidden, kind, offsets={name: off})  # two chunks of rows


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_pointers_misaligned_differently(rng, kind, dtype):
    n = dtypes.get(dtype).vec_elems
    for shift in (1, 2, 3, n - 1):
        offsets = {name: (shift * (k + 1)) % n for k, name in enumerate(names(kind))}
        for hidden in (8, 9, 4096, 5120):
            run_case(rng, dtype, 5, hidden, kind, offsets=offsets)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_hidden_sizes(rng, kind, dtype, hidden):
    run_case(rng, dtype, 3, hidden, kind)
    run_case(rng, dtype, 2, hidden, kind, offsets={name: 1 for name in names(kind)})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden, strides", [(5120, (5123, 5131, 5127)), (769, (1001, 771, 800)), (16, (17, 19, 23)),
                                             (4096, (4104, 4099, 4096))])
def test_row_strides(rng, kind, dtype, hidden, strides):
    strides = dict(zip(("grad_output", "input", "grad_input"), strides))
    run_case(rng, dtype, 37, hidden, kind, strides=strides)
    run_case(rng, dtype, 5, hidden, kind, strides=strides, offsets={name: k + 1 for k, name in enumerate(names(kind))})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows(rng, kind, dtype):
    # more than 65535 rows, and more than BACKWARD_FEW_ROWS: a chunk of rows per block
    run_case(rng, dtype, 70001, 9, kind, strides={"input": 11, "grad_output": 10}, offsets={"input": 1})
    run_case(rng, dtype, bwd_plan.BACKWARD_FEW_ROWS + 7, 5125, kind, offsets={"grad_input": 3})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("over", ["grad_output", "input"])
def test_in_place(rng, kind, dtype, over):
    for hidden, off in ((5120, 0), (5125, 3), (20000, 1)):
        run_case(rng, dtype, 17, hidden, kind, in_place=over, offsets={over: off})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [9, 5125, 16384])
def test_options(rng, dtype, hidden):
    run_case(rng, dtype, 20, hidden, "layer_norm", grad_dtype="float32", offsets={"grad_bias": 3, "input": 1})
    for kind in KINDS:
        for pdl in (False, True):
            run_case(rng, dtype, 20, hidden, kind, pdl=pdl)


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 7, 9, 769, 4096, 5125, 16384, 65537])
def test_weightless_is_the_weighted_backward_with_aligned_ones(layer_norm, dtype, hidden):
    """The same trees: grad_input (and LayerNorm's grad_bias) bitwise what the weighted kernel computes
    with a 16-byte aligned weight of ones, on any alignment of the rows, for few and many rows."""
    n = dtypes.get(dtype).vec_elems
    layouts = [({}, {}), ({"input": 1, "grad_output": n - 1, "grad_input": 2 % n}, {}),
               ({"grad_input": 3 % n}, {"input": hidden + 1, "grad_output": hidden + 3})]
    # Many rows (a chunk of rows per block) only up to hidden 769: the twin of 4097 x 65537 takes about
    # 20 s a call, six calls a case (it once stalled the whole suite); test_many_rows has many rows at 5125.
    for rows in (3, bwd_plan.BACKWARD_FEW_ROWS + 1) if hidden <= 769 else (3,):
        for offsets, strides in layouts:
            got = {}
            for weight in ("ones", "none"):  # the same seed each time: the same x and dy
                got[weight] = check_norm_backward(np.random.default_rng(hidden + rows), dtype, rows, hidden,
                                                  layer_norm=layer_norm, offsets=offsets, strides=strides, weight=weight)
            for name, values in got["none"].items():
                assert np.array_equal(bits(values), bits(got["ones"][name])), (name, rows, offsets, strides)
            assert set(got["none"]) == {"grad_input", *(("grad_bias",) if layer_norm else ())}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("hidden", [7, 5125, 16384])
def test_bitwise_identical_across_runs_and_rows_per_block(kind, dtype, hidden):
    rows = 150 if hidden != 7 else bwd_plan.BACKWARD_FEW_ROWS + 1
    layout = dict(offsets={"input": 1, "grad_input": 2}, strides={"grad_output": hidden + 3})
    results = []
    for rows_per_block in (None, 16, 1, 32, 48, 64, 160, 1600, 1, None):
        results.append(run_case(np.random.default_rng(7), dtype, rows, hidden, kind, rows_per_block=rows_per_block,
                                **layout))
    for other in results[1:]:
        for name, got in other.items():
            assert np.array_equal(bits(got), bits(results[0][name])), name


def test_nothing_summed_takes_no_workspace(rng):
    pyrms.release_workspaces()
    assert _workspace.cached_bytes() == 0
    for rows, hidden in ((3, 64), (5000, 4096), (40, 65537)):
        run_case(rng, "bfloat16", rows, hidden, "rms_norm")
        run_case(rng, "float16", rows, hidden, "layer_norm_no_grad_bias")
    assert _workspace.cached_bytes() == 0  # the pool gave out nothing
    run_case(rng, "float16", 40, 5125, "layer_norm")  # grad_bias is summed: one plane from the pool
    assert _workspace.cached_bytes() >= pyrms.backward_workspace_bytes(40, 5125, layer_norm=True, weight=False) > 0
    pyrms.release_workspaces()


@pytest.mark.parametrize("kind", KINDS)
def test_own_workspace_guards_stay_untouched(rng, kind):
    # where nothing is summed the workspace given is a guarded empty one: not a byte of it may change
    for hidden, rows in ((5125, 40), (16384, 33), (65537, 3)):
        run_case(rng, "bfloat16", rows, hidden, kind, own_workspace=True)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_captured_backward_without_weight(rng, layer_norm):
    rows, hidden = 40, 5125
    dy, x = allocate(rng, "bfloat16", rows, hidden), allocate(rng, "bfloat16", rows, hidden)
    p = bwd_plan.plan_norm_backward("bfloat16", hidden, centered=layer_norm, weight=False)
    want = bwd_twin.norm_backward_twin(dy.values(), x.values(), None, 1e-5, block=p.block, fold=p.stats_fold,
                                        x_phases=phases(x), chunk_rows=p.chunk_rows, centered=layer_norm)
    dx = allocate(rng, "bfloat16", rows, hidden, poison=True)
    params = [allocate(rng, "bfloat16", 1, hidden, poison=True)] if layer_norm else []
    with pyrms.Stream() as s:
        with pyrms.driver.capture(s) as graph:
            if layer_norm:
                pyrms.layer_norm_backward(dx.ptr, None, params[0].ptr, dy.ptr, x.ptr, None, 1e-5, rows, hidden,
                                          dtype="bfloat16", stream=s)
            else:
                pyrms.rms_norm_backward(dx.ptr, None, dy.ptr, x.ptr, None, 1e-5, rows, hidden, dtype="bfloat16",
                                        stream=s)
        for replay in range(3):
            for out in (dx, *params):
                out.upload(s)  # poison again: each replay must write every output
            graph.launch(s)
            s.synchronize()
            assert np.array_equal(bits(dx.device_values()), bits(want[0])), replay
            for out, expected in zip(params, want[1:]):
                assert np.array_equal(bits(out.device_values()[0]), bits(expected)), replay
        graph.close()
    for o in (dy, x, dx, *params):
        o.close()


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("rows, hidden", [(64, 4097), (3, 8192), (70, 16384)])
def test_against_torch_autograd_in_float64(op, rows, hidden):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    gen = torch.Generator(device="cuda").manual_seed(rows + hidden)
    for torch_dtype, name in ((torch.float16, "float16"), (torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        view = (lambda t: t.view(torch.int16)) if name == "bfloat16" else (lambda t: t)  # bf16 crosses as int16
        x = ((torch.rand(rows, hidden + 9, device="cuda", generator=gen) * 4 - 2).to(torch_dtype))[:, 3:3 + hidden]
        dy = ((torch.rand(rows, hidden + 4, device="cuda", generator=gen) * 2 - 1).to(torch_dtype))[:, 1:1 + hidden]
        dx = torch.full((rows, hidden), float("nan"), device="cuda", dtype=torch_dtype)
        db = torch.full((hidden,), float("nan"), device="cuda", dtype=torch.float32)
        if op == "rms_norm":
            pyrms.rms_norm_backward(view(dx), None, view(dy), view(x), None, 1e-6, rows, hidden, dtype=name)
        else:
            pyrms.layer_norm_backward(view(dx), None, db, view(dy), view(x), None, 1e-6, rows, hidden, dtype=name)
        torch.cuda.synchronize()
        x64 = x.double().requires_grad_()
        if op == "rms_norm":
            y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
            b64 = None
        else:
            b64 = torch.zeros(hidden, dtype=torch.float64, device="cuda", requires_grad=True)
            y = torch.nn.functional.layer_norm(x64, (hidden,), None, b64, eps=1e-6)
        y.backward(dy.double())
        tol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-5}[name]
        err = ((dx.double() - x64.grad).norm() / x64.grad.norm()).item()
        assert err < tol, (op, name, "dx", err)
        if b64 is not None:  # fp32 sums of exact inputs
            err = ((db.double() - b64.grad).norm() / b64.grad.norm()).item()
            assert err < 2e-5, (op, name, "db", err)
