"""Arrays as users hold them, on the GPU: torch tensors as they are (bf16, N-D, strided slices,
parameters), DLPack and CAI producers, sizes inferred, the allocating form; and the forced
few/many-row variants really launching the kernel they name. Results bitwise against the twin."""
import importlib

import numpy as np
import pytest

import pyrms
from pyrms import driver, launch
from pyrms.ops import _row_plan as plan
from tests.ops.fused_add_rms_norm.cases import check_fused_add_rms_norm
from tests.ops.layer_norm.cases import check_layer_norm
from tests.ops.rms_norm.cases import check_rms_norm
from tests.support.testing import bits, forced_row_variant
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

pytestmark = pytest.mark.gpu
rms_module = importlib.import_module("pyrms.ops.rms_norm.op")


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def _twin(torch, x2d, w, eps, **options):
    """The twin of a contiguous-row 2-D torch tensor, as torch bits."""
    dt = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[x2d.dtype]
    np_dtype = pyrms.dtypes.get(dt).numpy
    view = {2: torch.int16, 4: torch.int32}[x2d.element_size()]
    xs = x2d.contiguous().view(view).cpu().numpy().view(np_dtype)
    ws = w.detach().view(view).cpu().numpy().view(np_dtype)
    p = rms_plan.plan_rms_norm(dt, x2d.shape[-1], **options)
    row_phases = [(x2d[r].data_ptr() // x2d.element_size()) % (16 // x2d.element_size()) for r in range(x2d.shape[0])]
    want = rms_twin.rms_norm_twin(xs, ws, eps, block=p.block, row_phases=np.array(row_phases), **options)
    return torch.from_numpy(np.ascontiguousarray(want).view({2: np.int16, 4: np.int32}[x2d.element_size()]))


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16", "float32"])
def test_torch_tensors_as_they_are(dtype_name):
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = (torch.rand((2, 5, 4096), device="cuda", generator=gen) * 4 - 2).to(dtype)
    w = torch.nn.Parameter((torch.rand(4096, device="cuda", generator=gen) * 2 - 1).to(dtype))  # requires grad
    out = torch.empty_like(x)
    assert pyrms.rms_norm(out, x, w, 1e-6) is out  # sizes inferred, weight a parameter, N-D collapsed
    got = pyrms.rms_norm(None, x, w, 1e-6, dtype=dtype)  # the allocating form, a torch dtype
    torch.cuda.synchronize()
    want = _twin(torch, x.reshape(10, 4096), w, 1e-6)
    view = {2: torch.int16, 4: torch.int32}[x.element_size()]
    assert torch.equal(out.reshape(10, 4096).view(view).cpu(), want)
    assert got.shape == (2, 5, 4096)
    assert np.array_equal(bits(got.to_numpy().reshape(10, 4096)).view(want.numpy().dtype), want.numpy())
    got.close()


def test_strided_slices_and_streams():
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(4)
    base = (torch.rand((64, 3 * 1000 + 3), device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
    x = base[:, 1:1001]  # rows 3003 apart, starting one element in: misaligned, strided
    w = torch.rand(1000, device="cuda", generator=gen).to(torch.bfloat16)
    out = torch.zeros((64, 2000), device="cuda", dtype=torch.bfloat16)[:, 999:1999]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        pyrms.rms_norm(out, x, w, 1e-5, stream=torch.cuda.current_stream())
    stream.synchronize()
    assert torch.equal(out.contiguous().view(torch.int16).cpu(), _twin(torch, x, w, 1e-5))


def test_other_ops_take_torch_tensors():
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = (torch.rand((3, 7, 512), device="cuda", generator=gen) * 4 - 2).to(torch.float16)
    r = (torch.rand((3, 7, 512), device="cuda", generator=gen) * 4 - 2).to(torch.float16)
    w = torch.rand(512, device="cuda", generator=gen).to(torch.float16)
    b = torch.rand(512, device="cuda", generator=gen).to(torch.float16)
    x2, r2 = x.clone(), r.clone()
    pyrms.fused_add_rms_norm(x, r, w, 1e-6)  # sizes inferred
    pyrms.fused_add_rms_norm(x2.data_ptr(), r2.data_ptr(), w.data_ptr(), 1e-6, 21, 512, dtype="float16")
    y = pyrms.layer_norm(None, x, w, b, 1e-5)
    y2 = torch.empty_like(x)
    pyrms.layer_norm(y2.data_ptr(), x.data_ptr(), w.data_ptr(), b.data_ptr(), 1e-5, 21, 512, dtype=torch.float16)
    torch.cuda.synchronize()
    assert torch.equal(x, x2) and torch.equal(r, r2)
    assert np.array_equal(bits(y.to_numpy()), bits(y2.cpu().numpy()))
    y.close()


def test_dlpack_and_cai_producers():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(6)
    x = cupy.asarray(rng.uniform(-2, 2, (9, 768)).astype(np.float16))
    w = cupy.asarray(rng.uniform(-1, 1, 768).astype(np.float16))

    class DLPackOnly:  # an object speaking only DLPack, as JAX arrays do
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, stream=None):
            return self._a.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    out_cai, out_dl = cupy.empty_like(x), cupy.empty_like(x)
    pyrms.rms_norm(out_cai, x, w, 1e-6)
    pyrms.rms_norm(DLPackOnly(out_dl), DLPackOnly(x), DLPackOnly(w), 1e-6)
    driver.synchronize()
    p = rms_plan.plan_rms_norm("float16", 768)
    want = rms_twin.rms_norm_twin(cupy.asnumpy(x), cupy.asnumpy(w), 1e-6, block=p.block,
                                   row_phases=np.array([(int(x.data.ptr) // 2 + r * 768) % 8 for r in range(9)]))
    assert np.array_equal(bits(cupy.asnumpy(out_cai)), bits(want))
    assert np.array_equal(bits(cupy.asnumpy(out_dl)), bits(want))


@pytest.mark.parametrize("rows", [3, 300])
def test_forced_variants_launch_the_kernel_they_name(rng, rows):
    """check_*(variant=...) must launch that kernel (the few-row one with its wider block), and leave
    the planned choice as it was, for each op on the row core."""
    from pyrms.bench.host import recorded_launches
    fused_module = importlib.import_module("pyrms.ops.fused_add_rms_norm.op")
    ln_module = importlib.import_module("pyrms.ops.layer_norm.op")

    device = driver.selected_device()
    for check, p, module, misaligned in (
            (check_rms_norm, rms_plan.plan_rms_norm("bfloat16", 4096), rms_module, {"in_off": 1}),
            (check_fused_add_rms_norm, fused_plan.plan_fused_add_rms_norm("bfloat16", 4096), fused_module,
             {"offsets": {"residual": 3}}),
            (check_layer_norm, ln_plan.plan_layer_norm("bfloat16", 4096), ln_module, {"offsets": {"weight": 7}})):
        def kernel(expression):
            return launch.get_kernel(p.source, expression, p.group, p.signature, device).name

        many = (kernel(p.expression), p.block)
        for layout, few in (({}, (kernel(p.aligned_latency_expression), p.latency_block)),
                            (misaligned, (kernel(p.latency_expression), p.latency_block))):
            with recorded_launches() as calls:
                for variant in ("few", "many", None):
                    check(rng, "bfloat16", rows, 4096, variant=variant, **layout)
            launched = [(k.name, block) for k, _, block, *_ in calls]
            assert launched == [few, many, few if rows <= plan.FEW_ROWS else many], layout
            assert few != many and p.latency_block > p.block
        assert module._FEW_ROWS == plan.FEW_ROWS
    with pytest.raises(RuntimeError), forced_row_variant("few"):
        raise RuntimeError("restored on the way out")
    assert rms_module._FEW_ROWS == fused_module._FEW_ROWS == ln_module._FEW_ROWS == plan.FEW_ROWS


def test_backward_takes_nd_torch_tensors():
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(8)
    x = (torch.rand((2, 9, 768), device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
    dy = (torch.rand((2, 9, 768), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    w = torch.rand(768, device="cuda", generator=gen).to(torch.bfloat16)
    dx, dx2 = torch.empty_like(x), torch.empty_like(x)
    dw, dw2 = (torch.empty(768, device="cuda", dtype=torch.float32) for _ in range(2))
    pyrms.rms_norm_backward(dx, dw, dy, x, w, 1e-6)  # sizes from the arrays: [2, 9, 768] is 18 rows
    pyrms.rms_norm_backward(dx2.data_ptr(), dw2.data_ptr(), dy.data_ptr(), x.data_ptr(), w.data_ptr(), 1e-6, 18, 768,
                            dtype="bfloat16", grad_weight_dtype="float32")
    torch.cuda.synchronize()
    assert torch.equal(dx.view(torch.int16), dx2.view(torch.int16)) and torch.equal(dw, dw2)
