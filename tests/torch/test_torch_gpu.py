"""pyrms.torch on the GPU, as PyTorch users call it: torch tensors as they are (bf16, N-D, strided row
slices, Parameters), autograd, torch.library.opcheck, torch.compile(fullgraph=True), CUDA graph
capture, torch's current stream, and small Hugging Face models (built from a config, random weights)
whose norms are swapped for pyrms's.

What is compared with what, and why:
- Forward outputs, bit for bit, with pyrms's numpy twin (pyrms.reference) of the very rows the kernel
  read: each row's position in its 16-byte vector decides the kernel's summation order.
- Against Hugging Face's own RMSNorm, within one or two units in the last place: HF computes the same
  formula (pyrms's default rounding is LLaMA's and Qwen's), but with CUDA's approximate rsqrtf and
  torch's summation order, so a few outputs in a million round the other way. Hence the models: swapped for
  pyrms's RMSNorm they give logits bitwise equal to the same model whose norms run the twin, and
  logits within a few bf16 units of HF's eager ones. Compiled models are compared compiled to
  compiled (a compiled graph's GEMMs and fusions round differently from eager ones).
- Gradients against float64 autograd of the same formula, within a tolerance per dtype; dweight
  bitwise equal from run to run.
- The quantizing ops' tensors (q, scales, norm_out, the updated residual), bit for bit, with pyrms's
  raw-pointer op run on the same rows (tests/ops/rms_norm_quant/test_rms_norm_quant_gpu.py compares that with the twin).
"""
import copy
import importlib

import ml_dtypes
import numpy as np
import pytest
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.fused_add_rms_norm import twin as fused_twin
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pyrms  # noqa: E402
import pyrms.torch as pt  # noqa: E402
from pyrms.ops.rms_norm.torch_binding import _nd_view  # noqa: E402
from pyrms.torch._layout import DTYPE_NAMES, row_stride  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")]

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
BF16 = torch.bfloat16
INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
# Gradient tolerance, as a fraction of the largest reference value: two units in the last place of the
# dtype at that magnitude (the kernels round once, from fp32), ample for fp32 sums over the rows.
GRAD_TOL = {torch.float32: 2e-5, torch.float16: 2**-9, torch.bfloat16: 2**-7}


def randn(gen, *shape, dtype=BF16, scale=1.0, mean=0.0):
    return (torch.randn(*shape, device="cuda", generator=gen) * scale + mean).to(dtype)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype
            and torch.equal(a.contiguous().view(INT_VIEW[a.element_size()]), b.contiguous().view(INT_VIEW[b.element_size()])))


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place between two tensors of one float dtype."""
    def ordered(t):  # sign-magnitude bit patterns onto a line of integers (-0 and +0 both 0)
        i = t.contiguous().view(INT_VIEW[t.element_size()]).long()
        return torch.where(i < 0, -(i & ((1 << (8 * t.element_size() - 1)) - 1)), i)
    return (ordered(a) - ordered(b)).abs()


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous().cpu()
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == BF16 else t.numpy()


def from_numpy(a: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(a.view(np.int16)).view(BF16) if a.dtype == ml_dtypes.bfloat16 else torch.from_numpy(a)
    return t.cuda()


def row_phases(x: torch.Tensor, nd: bool = False) -> np.ndarray:
    """Each row's position (in elements) inside its 16-byte vector where pyrms.torch reads it: x's own
    memory when its rows are one stride apart (or, with ``nd``, for rms_norm, when its N-D kernel
    addresses them: pyrms/ops/rms_norm/torch_binding.py's _nd_view), else a contiguous copy (torch's allocator aligns it)."""
    hidden, size = x.shape[-1], x.element_size()
    if row_stride(x) is None and not (nd and _nd_view(x)):
        return np.arange(x.numel() // hidden) * hidden % (16 // size)
    lead, steps = x.shape[:-1], np.array(x.stride()[:-1], dtype=np.int64)
    offsets = (np.indices(lead).reshape(len(lead), -1) * steps[:, None]).sum(0) if lead else np.zeros(1, np.int64)
    return (x.data_ptr() + offsets * size) % 16 // size


def rows(t: torch.Tensor) -> np.ndarray:
    return to_numpy(t).reshape(-1, t.shape[-1])


def twin_rms_norm(x, weight, eps, *, gemma=False, round_once=False):
    block = rms_plan.plan_rms_norm(DTYPE_NAMES[x.dtype], x.shape[-1]).block
    y = rms_twin.rms_norm_twin(rows(x), None if weight is None else to_numpy(weight), eps, block=block,
                                row_phases=row_phases(x, nd=True), gemma=gemma, round_once=round_once)
    return from_numpy(y).reshape(x.shape)


def hf_rms_norm(x, weight, eps):
    """Hugging Face's LlamaRMSNorm.forward (also Qwen3's), as a function."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def hf_gemma_rms_norm(x, weight, eps):
    """Hugging Face's GemmaRMSNorm.forward, as a function."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).type_as(x)


def exact_rms_norm(x, weight, eps, gemma=False):
    """The formula in x's own dtype throughout (float64 for the gradient references); weight None: none."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * (1 + weight if gemma else weight)


def layouts(gen, dtype, hidden, mean=0.0):
    """Inputs of every layout pyrms.torch handles, fresh random values each."""
    def base(*shape):
        return randn(gen, *shape, dtype=dtype, mean=mean)
    yield "2-D", base(5, hidden)
    yield "3-D", base(2, 3, hidden)
    yield "1-D", base(hidden)
    yield "300 rows", base(300, hidden)  # past plan.FEW_ROWS: the kernel for many rows
    yield "row slice", base(2, 3, hidden + 11)[..., 3:3 + hidden]  # rows hidden + 11 apart, starting 3 elements in
    # no one row stride: rms_norm reads it where it lies (the N-D kernel), the other ops from a contiguous copy
    yield "transposed", base(3, 2, hidden).transpose(0, 1)


# --- forward, bit for bit ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_the_twin_on_every_layout(gen, dtype):
    for hidden in (769, 4096):
        weight = torch.nn.Parameter(randn(gen, hidden, dtype=dtype))  # as a model holds it
        for name, x in layouts(gen, dtype, hidden):
            with torch.no_grad():
                y = pt.rms_norm(x, weight, 1e-6)
            assert y.grad_fn is None and y.is_contiguous()
            assert bitwise_equal(y, twin_rms_norm(x, weight, 1e-6)), f"{name}, hidden {hidden}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_reads_strided_views_where_they_lie(gen, dtype):
    """QK-norm's q of a fused QKV projection and a transposed [batch, heads, seq, head_dim]: bit for bit
    the twin on the rows where they lie, and no copy of x (one allocation: the output)."""
    tokens, heads, d = 5, 4, 128
    qkv = randn(gen, tokens, (heads + 2) * d + 3, dtype=dtype)
    q = qkv[:, 3:3 + heads * d].view(tokens, heads, d)  # rows 3 elements past the tensor's start
    bhsd = randn(gen, 2, 7, 3, d, dtype=dtype).transpose(1, 2)  # [b, s, h, d] read as [b, h, s, d]
    for name, x in (("q of qkv", q), ("transposed", bhsd)):
        assert row_stride(x) is None and _nd_view(x), name
        for weight in (randn(gen, d, dtype=dtype), None):
            pt.rms_norm(x, weight, 1e-6)  # compiled and loaded before the count
            before = torch.cuda.memory_stats()["allocation.all.allocated"]
            y = pt.rms_norm(x, weight, 1e-6)
            assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 1, name
            assert y.is_contiguous() and bitwise_equal(y, twin_rms_norm(x, weight, 1e-6)), (name, weight is None)
    wide = randn(gen, 2, 3, 4, 5, d, dtype=dtype).permute(0, 2, 1, 3, 4)[..., ::2, :]  # four leading dimensions
    assert not _nd_view(wide) and bitwise_equal(pt.rms_norm(wide, None, 1e-6), twin_rms_norm(wide, None, 1e-6))


def test_rms_norm_options_match_the_twin(gen):
    x, w = randn(gen, 2, 7, 5125), randn(gen, 5125, scale=0.1)
    for gemma, round_once in ((True, False), (False, True), (True, True)):
        y = pt.rms_norm(x, w, 1e-5, gemma=gemma, round_once=round_once)
        assert bitwise_equal(y, twin_rms_norm(x, w, 1e-5, gemma=gemma, round_once=round_once)), (gemma, round_once)


def test_inference_mode(gen):
    x, norm = randn(gen, 4, 1024), pt.RMSNorm(1024, dtype=BF16, device="cuda")
    with torch.inference_mode():
        y = norm(x)
    assert bitwise_equal(y, twin_rms_norm(x, norm.weight, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_matches_the_twin(gen, dtype):
    hidden = 769
    w = randn(gen, hidden, dtype=dtype)
    for name, make in (("3-D", lambda: randn(gen, 2, 3, hidden, dtype=dtype)),
                       ("row slice", lambda: randn(gen, 2, 3, hidden + 5, dtype=dtype)[..., 1:1 + hidden])):
        x, residual = make(), make()
        block = fused_plan.plan_fused_add_rms_norm(DTYPE_NAMES[dtype], hidden).block
        want_x, want_residual = fused_twin.fused_add_rms_norm_twin(rows(x), rows(residual), to_numpy(w), 1e-6, block=block,
                                                                  residual_phases=row_phases(residual))
        versions = x._version, residual._version
        with torch.no_grad():
            assert pt.fused_add_rms_norm(x, residual, w, 1e-6) is None
        assert bitwise_equal(x, from_numpy(want_x).reshape(x.shape)), name
        assert bitwise_equal(residual, from_numpy(want_residual).reshape(x.shape)), name
        assert x._version > versions[0] and residual._version > versions[1]  # autograd knows they changed


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_matches_the_twin(gen, dtype):
    hidden = 769
    w, b = randn(gen, hidden, dtype=dtype), randn(gen, hidden, dtype=dtype)
    for name, x in layouts(gen, dtype, hidden, mean=3.0):  # a mean far from 0
        for bias in (b, None):
            block = ln_plan.plan_layer_norm(DTYPE_NAMES[dtype], hidden, bias=bias is not None).block
            want = ln_twin.layer_norm_twin(rows(x), to_numpy(w), None if bias is None else to_numpy(bias), 1e-5,
                                             block=block, row_phases=row_phases(x))
            assert bitwise_equal(pt.layer_norm(x, w, bias, 1e-5), from_numpy(want).reshape(x.shape)), (name, bias is None)


@pytest.mark.parametrize("formula", ["llama", "gemma"])
def test_hugging_face_formulas_within_an_ulp_or_two(gen, formula):
    x, w = randn(gen, 64, 16, 1024), randn(gen, 1024, scale=0.2) + 1
    if formula == "llama":
        ours, theirs = pt.rms_norm(x, w, 1e-6), hf_rms_norm(x, w, 1e-6)
    else:
        ours, theirs = pt.rms_norm(x, w, 1e-6, gemma=True, round_once=True), hf_gemma_rms_norm(x, w, 1e-6)
    distance = ulps(ours, theirs)
    assert distance.max() <= 2 and (distance > 0).float().mean() < 1e-3, (distance.max(), (distance > 0).sum())


# --- autograd ----------------------------------------------------------------------------------------


def assert_close_to(got, want, dtype, what):
    err, scale = (got.double() - want).abs().max().item(), want.abs().max().item()
    assert err <= GRAD_TOL[dtype] * scale, f"{what}: max error {err:.3g} > {GRAD_TOL[dtype]} x max |value| {scale:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemma", [False, True])
def test_rms_norm_grads_match_float64_autograd(gen, dtype, gemma):
    x = randn(gen, 3, 22, 769, dtype=dtype).requires_grad_()
    w = torch.nn.Parameter(randn(gen, 769, dtype=dtype, scale=0.3) + (0 if gemma else 1))
    grad = randn(gen, 3, 22, 769, dtype=dtype)
    pt.rms_norm(x, w, 1e-6, gemma=gemma).backward(grad)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    exact_rms_norm(x64, w64, 1e-6, gemma).backward(grad.double())
    assert x.grad.dtype == dtype and w.grad.dtype == dtype
    assert_close_to(x.grad, x64.grad, dtype, "dx")
    assert_close_to(w.grad, w64.grad, dtype, "dweight")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_grads_match_float64_autograd(gen, dtype, with_bias):
    x = (randn(gen, 70, 769, dtype=dtype) + 2).requires_grad_()
    w = torch.nn.Parameter(randn(gen, 769, dtype=dtype))
    b = torch.nn.Parameter(randn(gen, 769, dtype=dtype)) if with_bias else None
    grad = randn(gen, 70, 769, dtype=dtype)
    pt.layer_norm(x, w, b, 1e-5).backward(grad)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, *([b] if with_bias else []))]
    torch.nn.functional.layer_norm(leaves[0], (769,), *leaves[1:], eps=1e-5).backward(grad.double())
    for name, ours, want in zip(("dx", "dweight", "dbias"), (x.grad, w.grad, b.grad if with_bias else None), leaves):
        assert_close_to(ours, want.grad, dtype, name)


def test_dweight_is_bitwise_reproducible(gen):
    x, grad = randn(gen, 1000, 4096), randn(gen, 1000, 4096)
    w, b = randn(gen, 4096), randn(gen, 4096)

    def grads():
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        pt.rms_norm(leaves[0], leaves[1], 1e-6).backward(grad)
        ln = [t.clone().requires_grad_() for t in (x, w, b)]
        pt.layer_norm(*ln, 1e-5).backward(grad)
        return [t.grad for t in leaves[:2] + ln]

    first, second = grads(), grads()
    assert all(bitwise_equal(a, c) for a, c in zip(first, second))


# --- torch integration -------------------------------------------------------------------------------


def opcheck_cases(gen):
    x, g, w, b = randn(gen, 2, 5, 769), randn(gen, 2, 5, 769), randn(gen, 769), randn(gen, 769)
    ops = torch.ops.pyrms
    return {
        "rms_norm": (ops.rms_norm.default, (x.clone().requires_grad_(), w.clone().requires_grad_(), 1e-6, False, False)),
        "rms_norm gemma round_once": (ops.rms_norm.default, (x, w, 1e-6, True, True)),
        "rms_norm_backward": (ops.rms_norm_backward.default, (g, x, w, 1e-6, False)),
        "fused_add_rms_norm": (ops.fused_add_rms_norm.default, (x.clone(), g.clone(), w, 1e-6, False, False)),
        "layer_norm": (ops.layer_norm.default, (x.clone().requires_grad_(), w.clone().requires_grad_(),
                                                b.clone().requires_grad_(), 1e-5)),
        "layer_norm no bias": (ops.layer_norm.default, (x.clone().requires_grad_(), w.clone().requires_grad_(), None, 1e-5)),
        "layer_norm_backward": (ops.layer_norm_backward.default, (g, x, w, 1e-5, True)),
        "layer_norm_backward no bias": (ops.layer_norm_backward.default, (g, x, w, 1e-5, False)),
        "rms_norm no weight": (ops.rms_norm.default, (x.clone().requires_grad_(), None, 1e-6, False, True)),
        "rms_norm_backward no weight": (ops.rms_norm_backward.default, (g, x, None, 1e-6, False)),
        "layer_norm no weight": (ops.layer_norm.default, (x.clone().requires_grad_(), None, b.clone().requires_grad_(),
                                                          1e-5)),
        "layer_norm no weight no bias": (ops.layer_norm.default, (x.clone().requires_grad_(), None, None, 1e-5)),
        "layer_norm_backward no weight": (ops.layer_norm_backward.default, (g, x, None, 1e-5, True)),
        "layer_norm_backward no weight no bias": (ops.layer_norm_backward.default, (g, x, None, 1e-5, False)),
    }


@pytest.mark.parametrize("case", ["rms_norm", "rms_norm gemma round_once", "rms_norm_backward", "fused_add_rms_norm",
                                  "layer_norm", "layer_norm no bias", "layer_norm_backward",
                                  "layer_norm_backward no bias", "rms_norm no weight", "rms_norm_backward no weight",
                                  "layer_norm no weight", "layer_norm no weight no bias", "layer_norm_backward no weight",
                                  "layer_norm_backward no weight no bias"])
def test_opcheck(gen, case):
    op, args = opcheck_cases(gen)[case]
    torch.library.opcheck(op, args)


def test_compile_fullgraph_matches_eager(gen, dynamo):
    def f(x, residual, w, b):
        y = pt.rms_norm(x, w, 1e-6)
        z = pt.layer_norm(x, w, b, 1e-5)
        pt.fused_add_rms_norm(x, residual, w, 1e-6)
        return y, z

    x, residual, w, b = randn(gen, 4, 8, 1024), randn(gen, 4, 8, 1024), randn(gen, 1024), randn(gen, 1024)
    compiled = torch.compile(f, fullgraph=True)
    runs = []
    for fn in (f, compiled):
        xs, rs = x.clone(), residual.clone()
        with torch.no_grad():
            runs.append((*fn(xs, rs, w, b), xs, rs))
    assert all(bitwise_equal(a, c) for a, c in zip(*runs))


def test_compile_fullgraph_backward_matches_eager(gen, dynamo):
    norm = pt.RMSNorm(1024, dtype=BF16, device="cuda")
    with torch.no_grad():
        norm.weight.copy_(randn(gen, 1024))
    x, grad = randn(gen, 4, 8, 1024), randn(gen, 4, 8, 1024)
    results = []
    for module in (norm, torch.compile(norm, fullgraph=True)):
        norm.weight.grad = None
        leaf = x.clone().requires_grad_()
        y = module(leaf)
        y.backward(grad)
        results.append((y.detach(), leaf.grad, norm.weight.grad))
    assert all(bitwise_equal(a, c) for a, c in zip(*results))


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_weight_matches_the_twin_on_every_layout(gen, dtype):
    """torch.nn.RMSNorm/LayerNorm(elementwise_affine=False): weight=None, bit for bit the twins'."""
    hidden = 769
    b = randn(gen, hidden, dtype=dtype)
    for name, x in layouts(gen, dtype, hidden, mean=1.0):
        for round_once in (False, True):
            assert bitwise_equal(pt.rms_norm(x, None, 1e-6, round_once=round_once),
                                 twin_rms_norm(x, None, 1e-6, round_once=round_once)), (name, round_once)
        for bias in (b, None):
            block = ln_plan.plan_layer_norm(DTYPE_NAMES[dtype], hidden, bias=bias is not None, weight=False).block
            want = ln_twin.layer_norm_twin(rows(x), None, None if bias is None else to_numpy(bias), 1e-5, block=block,
                                             row_phases=row_phases(x))
            assert bitwise_equal(pt.layer_norm(x, None, bias, 1e-5), from_numpy(want).reshape(x.shape)), (name, bias)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grads_without_weight_match_float64_autograd(gen, dtype):
    grad = randn(gen, 3, 22, 769, dtype=dtype)
    x = randn(gen, 3, 22, 769, dtype=dtype).requires_grad_()
    pt.RMSNorm(769, 1e-6, elementwise_affine=False)(x).backward(grad)
    x64 = x.detach().double().requires_grad_()
    exact_rms_norm(x64, None, 1e-6).backward(grad.double())
    assert x.grad.dtype == dtype
    assert_close_to(x.grad, x64.grad, dtype, "rms_norm dx")
    for b in (torch.nn.Parameter(randn(gen, 769, dtype=dtype)), None):
        x = (randn(gen, 3, 22, 769, dtype=dtype) + 2).requires_grad_()
        pt.layer_norm(x, None, b, 1e-5).backward(grad)
        leaves = [t.detach().double().requires_grad_() for t in (x, *([b] if b is not None else []))]
        torch.nn.functional.layer_norm(leaves[0], (769,), None, *leaves[1:], eps=1e-5).backward(grad.double())
        assert_close_to(x.grad, leaves[0].grad, dtype, "layer_norm dx")
        if b is not None:
            assert_close_to(b.grad, leaves[1].grad, dtype, "layer_norm dbias")
    module = pt.LayerNorm(769, elementwise_affine=False)  # torch.nn.LayerNorm's twin: no parameters at all
    x = randn(gen, 5, 769, dtype=dtype).requires_grad_()
    module(x).backward(grad[0, :5])
    leaf = x.detach().double().requires_grad_()
    torch.nn.LayerNorm(769, elementwise_affine=False, device="cuda", dtype=torch.float64)(leaf).backward(grad[0, :5].double())
    assert_close_to(x.grad, leaf.grad, dtype, "nn.LayerNorm(elementwise_affine=False) dx")


def test_grads_without_weight_are_the_weighted_grads_with_ones(gen):
    """The same kernels' trees: dx of a weightless norm is bitwise dx of the weighted one with ones."""
    for hidden in (769, 4096, 5125):
        x, grad = randn(gen, 300, hidden), randn(gen, 300, hidden)
        for norm in (pt.rms_norm, lambda x, w: pt.layer_norm(x, w, None)):
            dx = []
            for weight in (None, torch.ones(hidden, dtype=BF16, device="cuda", requires_grad=True)):
                leaf = x.clone().requires_grad_()
                norm(leaf, weight).backward(grad)
                dx.append(leaf.grad)
            assert bitwise_equal(*dx), hidden


def test_compile_fullgraph_backward_without_weight_matches_eager(gen, dynamo):
    norm = pt.RMSNorm(1024, elementwise_affine=False)
    x, grad = randn(gen, 4, 8, 1024), randn(gen, 4, 8, 1024)
    results = []
    for module in (norm, torch.compile(norm, fullgraph=True)):
        leaf = x.clone().requires_grad_()
        y = module(leaf)
        y.backward(grad)
        results.append((y.detach(), leaf.grad))
    assert all(bitwise_equal(a, c) for a, c in zip(*results))


def test_cuda_graph_capture(gen):
    x, w = randn(gen, 64, 4096), randn(gen, 4096)
    pt.rms_norm(x, w, 1e-6)  # compiles and loads the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = pt.rms_norm(x, w, 1e-6)
    x.copy_(randn(gen, 64, 4096))
    graph.replay()
    torch.cuda.synchronize()
    assert bitwise_equal(y, twin_rms_norm(x, w, 1e-6))


def test_launches_on_torch_current_stream(gen):
    src, w = randn(gen, 8, 1024), randn(gen, 1024)
    x = torch.ones_like(src)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # keeps `side` busy for milliseconds: a launch elsewhere would read ones
        x.copy_(src)
        y = pt.rms_norm(x, w, 1e-6)
    side.synchronize()
    assert bitwise_equal(y, twin_rms_norm(src, w, 1e-6))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_tensors_on_another_device_are_refused(gen):
    x, w = randn(gen, 2, 64).to("cuda:1"), randn(gen, 64).to("cuda:1")
    with pytest.raises(ValueError, match=r"the tensors are on cuda:1, but pyrms launches on device 0"):
        pt.rms_norm(x, w)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_tensors_on_device_1_with_device_1_selected(gen):
    """Multi-GPU: pyrms on device 1 (set_device, torch's current device too): the forward bitwise equal to
    the twin, the backward run there (tests/ops/test_multi_device_gpu.py checks every op bitwise, and two threads)."""
    x = randn(gen, 8, 5120).to("cuda:1").requires_grad_()
    w = torch.nn.Parameter(randn(gen, 5120).to("cuda:1"))
    pyrms.driver.set_device(1)
    try:
        with torch.cuda.device(1):
            y = pt.rms_norm(x, w, 1e-6)
            y.float().square().sum().backward()
            torch.cuda.synchronize()
        assert y.device.index == w.grad.device.index == 1
        assert bitwise_equal(y.detach().cpu(), twin_rms_norm(x.detach(), w.detach(), 1e-6).cpu())
        assert w.grad is not None and torch.isfinite(w.grad.float()).all()
    finally:
        pyrms.driver.set_device(0)


# --- the quantizing ops: pyrms.torch's tensors are pyrms's raw-pointer outputs, bit for bit -----------


def quant_cases():
    """(name, keyword arguments) of pyrms.torch's quantizing functions: every mode and output dtype, the
    scales' layouts, and the scale and scale_ub as tensors (one fp32 each, read on the stream)."""
    one = torch.tensor([0.02], device="cuda")
    return [
        ("static", dict(scale=0.02)),
        ("static int8, device scale", dict(out_dtype=torch.int8, scale=one)),
        ("per_token", dict(mode="per_token")),
        ("per_token e5m2, scale_ub", dict(mode="per_token", out_dtype=torch.float8_e5m2, scale_ub=1.5)),
        ("per_token, device scale_ub, round_input", dict(mode="per_token", scale_ub=one * 50, round_input=True)),
        ("per_token int8", dict(mode="per_token", out_dtype=torch.int8)),
        ("per_group", dict(mode="per_group")),
        ("per_group 64 ue8m0 column-major", dict(mode="per_group", group_size=64, ue8m0=True,
                                                 column_major_scales=True)),
        ("per_group int8 tma-aligned", dict(mode="per_group", out_dtype=torch.int8, column_major_scales=True,
                                            tma_aligned_scales=True)),
    ]


def raw_quant(x, w, eps, residual=None, *, out_dtype=torch.float8_e4m3fn, mode="static", scale=None, scale_ub=None,
              group_size=None, ue8m0=False, column_major_scales=False, tma_aligned_scales=False, round_input=False,
              norm_out=False, sum_precision=None):
    """pyrms.rms_norm_quant (fused_add_rms_norm_quant with a residual) through raw pointers on the rows where
    pyrms.torch reads them (a contiguous copy where no one stride addresses them), into outputs allocated
    here: (q [rows, hidden], scales [rows, per row] or None, norm_out [rows, hidden] or None)."""
    src = x if row_stride(x) is not None else x.contiguous()
    hidden = x.shape[-1]
    rows = x.numel() // hidden
    q = torch.empty(rows, hidden, dtype=out_dtype, device="cuda")
    y = torch.empty(rows, hidden, dtype=x.dtype, device="cuda") if norm_out else None
    span = -(-rows // 4) * 4 if tma_aligned_scales else rows
    groups = hidden // (group_size or 128)
    scales = {"static": None, "per_token": torch.empty(rows, 1, device="cuda"),
              "per_group": (torch.empty(groups, span, device="cuda").t()[:rows] if column_major_scales
                            else torch.empty(rows, groups, device="cuda"))}[mode]

    def pointer(value):
        return value.data_ptr() if isinstance(value, torch.Tensor) else value

    options = dict(scale=pointer(scale) if mode == "static" else scales.data_ptr(),
                   out_dtype=str(out_dtype).removeprefix("torch."), mode=mode, scale_ub=pointer(scale_ub),
                   group_size=group_size, ue8m0=ue8m0, column_major_scales=column_major_scales,
                   scale_stride=span if column_major_scales else None, dtype=DTYPE_NAMES[x.dtype],
                   input_stride=row_stride(src), norm_out=pointer(y), round_input=round_input,
                   stream=torch.cuda.current_stream())
    if residual is None:
        pyrms.rms_norm_quant(q.data_ptr(), src.data_ptr(), w.data_ptr(), eps, rows, hidden, **options)
    else:
        pyrms.fused_add_rms_norm_quant(q.data_ptr(), src.data_ptr(), residual.data_ptr(), w.data_ptr(), eps, rows,
                                       hidden, residual_stride=row_stride(residual), sum_precision=sum_precision,
                                       **options)
    return q, scales, y


def assert_quant_equal(got, want, x, kwargs, norm_out, what):
    """pyrms.torch's return (q, then the scales unless static, then norm_out if asked for) against raw_quant's."""
    q, scales, y = want
    got = list(got) if isinstance(got, tuple) else [got]
    expected = [q] + ([] if scales is None else [scales]) + ([y] if norm_out else [])
    assert len(got) == len(expected), what
    assert got[0].shape == x.shape and got[0].is_contiguous(), what
    for a, b in zip(got, expected):
        assert bitwise_equal(a.reshape(b.shape), b), what
    if kwargs.get("column_major_scales") and x.dim() > 1:  # the rows' scales one float apart, each group's
        # after the last row's (a 1-D x is one row: its scales are a vector)
        assert got[1].stride(-2) == 1 and got[1].stride(-1) == scales.stride(-1), what


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_quant_is_the_raw_op_bit_for_bit(gen, dtype):
    hidden = 1408  # 11 groups of 128, 22 of 64
    w = randn(gen, hidden, dtype=dtype)
    for name, x in layouts(gen, dtype, hidden):
        for case, kwargs in quant_cases():
            for norm_out in (False, True):
                got = pt.rms_norm_quant(x, w, 1e-6, norm_out=norm_out, **kwargs)
                want = raw_quant(x, w, 1e-6, norm_out=norm_out, **kwargs)
                assert_quant_equal(got, want, x, kwargs, norm_out, (name, case, norm_out))


@pytest.mark.parametrize("sum_precision", [None, "fp32"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_quant_is_the_raw_op_bit_for_bit(gen, dtype, sum_precision):
    """residual updated in place as the raw op updates its own copy (contiguous, so at the same phase), x only read;
    with either sum normalized (sum_precision="fp32": the fp32 sum, as the raw op's)."""
    hidden = 1408
    w = randn(gen, hidden, dtype=dtype)
    for shape in ((2, 3, hidden), (300, hidden)):
        x, residual = randn(gen, *shape, dtype=dtype), randn(gen, *shape, dtype=dtype)
        before = x.clone()
        for case, kwargs in quant_cases():
            kwargs = {**kwargs, "sum_precision": sum_precision}
            for norm_out in (False, True):
                ours, theirs = residual.clone(), residual.clone()
                version = ours._version
                with torch.no_grad():
                    got = pt.fused_add_rms_norm_quant(x, ours, w, 1e-6, norm_out=norm_out, **kwargs)
                want = raw_quant(x, w, 1e-6, theirs, norm_out=norm_out, **kwargs)
                assert_quant_equal(got, want, x, kwargs, norm_out, (shape, case, norm_out))
                assert bitwise_equal(ours, theirs) and ours._version > version, (shape, case)
        assert bitwise_equal(x, before)


def test_rms_norm_quant_under_autograd_computes_the_same(gen):
    """A Parameter weight under grad mode (inference without no_grad): the custom op, the same bits; a backward
    through its outputs raises, as for any custom op without an autograd formula."""
    x, w = randn(gen, 4, 1408), torch.nn.Parameter(randn(gen, 1408))
    q, scales = pt.rms_norm_quant(x, w, 1e-6, mode="per_group")
    assert q.requires_grad
    with torch.no_grad():
        assert_quant_equal((q, scales), raw_quant(x, w, 1e-6, mode="per_group"), x, {}, False, "under autograd")
    with pytest.raises(RuntimeError, match="no autograd formula"):
        scales.sum().backward()


def test_quant_scale_out_of_range_is_refused_at_the_launch(gen):
    x, w = randn(gen, 2, 1408), randn(gen, 1408)
    with pytest.raises(ValueError, match="scale must be finite and > 0 in float32"):
        pt.rms_norm_quant(x, w, 1e-6, scale=-1.0)
    with pytest.raises(ValueError, match="scale_ub must be finite and > 0 in float32"):
        pt.rms_norm_quant(x, w, 1e-6, mode="per_token", scale_ub=0.0)


def test_quant_compile_fullgraph_matches_eager(gen, dynamo):
    def f(x, residual, w, s):
        q = pt.rms_norm_quant(x, w, 1e-6, scale=s)
        q1, token_scales, y = pt.rms_norm_quant(x, w, 1e-6, mode="per_token", scale_ub=1.5, norm_out=True)
        q2, group_scales = pt.rms_norm_quant(x, w, 1e-6, mode="per_group", ue8m0=True, column_major_scales=True,
                                             tma_aligned_scales=True)
        q3, fused_scales = pt.fused_add_rms_norm_quant(x, residual, w, 1e-6, mode="per_group", group_size=64,
                                                       out_dtype=torch.int8)
        return q, q1, token_scales, y, q2, group_scales, q3, fused_scales

    x, residual, w = randn(gen, 4, 7, 1408), randn(gen, 4, 7, 1408), randn(gen, 1408)
    s = torch.tensor([0.02], device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    runs = []
    for fn in (f, compiled):
        rs = residual.clone()
        with torch.no_grad():
            runs.append((*fn(x, rs, w, s), rs))
    assert all(a.stride() == c.stride() and bitwise_equal(a, c) for a, c in zip(*runs))


def test_quant_opcheck(gen):
    x, w = randn(gen, 2, 5, 1408), randn(gen, 1408)
    ops = torch.ops.pyrms
    torch.library.opcheck(ops.rms_norm_quant.default, (x, w, 1e-6, torch.float8_e4m3fn, "per_group", None, None,
                                                       None, None, None, False, True, True, False, True))
    torch.library.opcheck(ops.fused_add_rms_norm_quant.default,
                          (x, randn(gen, 2, 5, 1408), w, 1e-6, torch.int8, "static", None,
                           torch.tensor([0.02], device="cuda"), None, None, None, False, False, False, True, True))


# --- Hugging Face models -----------------------------------------------------------------------------


class TwinRMSNorm(torch.nn.Module):
    """A Hugging Face RMSNorm computed by pyrms's numpy twin on the CPU: the kernel's arithmetic, bit for bit."""

    def __init__(self, norm):
        super().__init__()
        self.weight = norm.weight
        self.eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        self.options = pt.HF_RMS_NORMS[type(norm).__name__]

    def forward(self, x):
        return twin_rms_norm(x, self.weight, self.eps, **self.options)


def with_twin_norms(model):
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ in pt.HF_RMS_NORMS:
                setattr(parent, name, TwinRMSNorm(child))
    return model


def build_model(kind):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    sizes = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, attn_implementation="eager")
    if kind == "llama":
        model_class, config = transformers.LlamaForCausalLM, transformers.LlamaConfig(**sizes)
    else:
        model_class, config = transformers.Qwen3ForCausalLM, transformers.Qwen3Config(head_dim=64, **sizes)
    torch.manual_seed(0)
    model = model_class(config).to(device="cuda", dtype=BF16).eval()
    norms = [m for m in model.modules() if type(m).__name__ in pt.HF_RMS_NORMS]
    assert len(norms) == (5 if kind == "llama" else 9), [type(m).__name__ for m in model.modules()]
    with torch.no_grad():
        for m in norms:  # HF initializes them to ones, which would leave the weight multiply untested
            m.weight.uniform_(0.5, 1.5)
    return model


def swapped(model):
    report = pt.replace_norms(copy.deepcopy(model))
    assert report.swapped and not report.kept, str(report)
    assert not [m for m in report.model.modules() if type(m).__name__ in pt.HF_RMS_NORMS]
    return report.model


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def assert_logits_close(ours, theirs, what):
    err, scale = (ours.float() - theirs.float()).abs().max().item(), theirs.float().abs().max().item()
    differing = (ours != theirs).sum().item()
    assert err <= 2**-5 * scale, f"{what}: max |difference| {err:.3g} > 2^-5 x max |logit| {scale:.3g} ({differing} differ)"


@pytest.fixture
def ids(gen):
    return torch.randint(0, 1000, (2, 24), device="cuda", generator=gen)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_model_with_pyrms_norms_is_bitwise_the_model_with_twin_norms(kind, ids):
    hf = build_model(kind)
    assert bitwise_equal(logits(swapped(hf), ids), logits(with_twin_norms(hf), ids))


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_model_with_pyrms_norms_matches_hugging_face_eager(kind, ids):
    hf = build_model(kind)
    seen = []
    hooks = [m.register_forward_hook(lambda m, args, out: seen.append((m, args[0], out)))
             for m in hf.modules() if type(m).__name__ in pt.HF_RMS_NORMS]
    theirs = logits(hf, ids)
    for hook in hooks:
        hook.remove()
    for norm, x, out in seen:  # every norm call of HF's forward, redone by pyrms on the same input
        with torch.no_grad():
            distance = ulps(pt.rms_norm(x, norm.weight, norm.variance_epsilon), out)
        assert distance.max() <= 2 and (distance > 0).float().mean() < 1e-3, (type(norm).__name__, tuple(x.shape))
    assert_logits_close(logits(swapped(hf), ids), theirs, f"{kind} with pyrms norms vs Hugging Face eager")


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_compiled_model_with_pyrms_norms_matches_compiled_hugging_face(kind, ids, dynamo):
    hf = build_model(kind)
    ours = swapped(hf)
    eager_ours = logits(ours, ids)
    compiled_ours = logits(torch.compile(ours), ids)
    assert_logits_close(compiled_ours, logits(torch.compile(hf), ids), f"compiled {kind}: pyrms norms vs HF's")
    assert_logits_close(compiled_ours, eager_ours, f"{kind} with pyrms norms: compiled vs eager")


# One class of each formula replace_norms knows (pyrms/model_norms.py), as transformers defines it.
HF_NORM_CLASSES = [("llama", "LlamaRMSNorm"), ("olmo2", "Olmo2RMSNorm"), ("gpt_oss", "GptOssRMSNorm"),
                   ("gemma3", "Gemma3RMSNorm"), ("qwen3_next", "Qwen3NextRMSNorm"), ("gemma4", "Gemma4RMSNorm")]


def hf_norm_class(family, name):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    try:
        return getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"), name)
    except (ImportError, AttributeError):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")


def assert_same_formula(ours, theirs, what):
    """The output dtype, and values within two units of bf16 at the largest magnitude (HF's rsqrtf and
    summation order flip a rounding now and then; a wrong formula, offset or eps is off by far more)."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (what, ours.dtype, theirs.dtype)
    err, scale = (ours.double() - theirs.double()).abs().max().item(), theirs.double().abs().max().item()
    assert err <= 2**-7 * scale, f"{what}: max |difference| {err:.3g} > 2^-7 x {scale:.3g}"


@pytest.mark.parametrize("family, name", HF_NORM_CLASSES)
@pytest.mark.parametrize("w_dtype", [BF16, torch.float32])
def test_replace_norms_computes_each_hugging_face_formula(gen, family, name, w_dtype):
    """Each class swapped by replace_norms computes transformers' own forward, with bf16 weights and with fp32
    master weights (whose output dtype differs between the formulas: fp32 for LLaMA's, bf16 for the others)."""
    norm = hf_norm_class(family, name)(1024, eps=1e-5).to(device="cuda", dtype=w_dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=gen)
        x = randn(gen, 4, 33, 1024)
        theirs = norm(x)
        report = pt.replace_norms(norm)
        assert [(s.path, s.was) for s in report.swapped] == [("", name)], str(report)
        assert_same_formula(report.model(x), theirs, f"{name}, {w_dtype} weight")


def test_replace_norms_computes_gemma_4s_norm_without_scale(gen):
    norm = hf_norm_class("gemma4", "Gemma4RMSNorm")(256, eps=1e-6, with_scale=False).cuda()
    x = randn(gen, 3, 8, 256)
    with torch.no_grad():
        ours = pt.replace_norms(norm).model
        assert type(ours) is pt.RMSNorm and ours.weight is None
        assert_same_formula(ours(x), norm(x), "Gemma4RMSNorm(with_scale=False)")


@pytest.mark.parametrize("x_dtype, w_dtype", [(BF16, BF16), (torch.float16, torch.float16),
                                              (torch.float32, torch.float32), (BF16, torch.float32)])
def test_replace_norms_computes_torch_rms_norm(gen, x_dtype, w_dtype):
    """torch.nn.RMSNorm swapped: one rounding, in x's dtype (its fused kernel; an fp32 weight beside bf16 takes
    its composite path, which rounds once too), and eps=None as PyTorch resolves it, FLT_EPSILON whatever x's
    dtype: the first row's mean square is near it, where finfo(x.dtype).eps would give another output."""
    for affine in (True, False):
        norm = torch.nn.RMSNorm(1024, elementwise_affine=affine, device="cuda", dtype=w_dtype)
        x = randn(gen, 4, 33, 1024, dtype=x_dtype)
        x[0] *= 2**-12
        with torch.no_grad():
            if affine:
                norm.weight.uniform_(0.5, 1.5, generator=gen)
            theirs = norm(x)
            ours = pt.replace_norms(norm).model
            assert type(ours) is pt.RMSNorm and ours.round_once and ours.eps == 2.0 ** -23
            assert_same_formula(ours(x), theirs, f"nn.RMSNorm, x {x_dtype}, weight {w_dtype if affine else None}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_norm_layer_grads_against_hugging_face_autograd(gen, dtype):
    pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf = LlamaRMSNorm(512, eps=1e-6).to(device="cuda", dtype=dtype)
    with torch.no_grad():
        hf.weight.copy_(randn(gen, 512, dtype=dtype, scale=0.3) + 1)
    ours = pt.RMSNorm(512, eps=1e-6, dtype=dtype, device="cuda")
    ours.load_state_dict(hf.state_dict())
    x, grad = randn(gen, 4, 33, 512, dtype=dtype), randn(gen, 4, 33, 512, dtype=dtype)
    results = {}
    for name, module in (("pyrms", ours), ("hf", hf)):
        leaf = x.clone().requires_grad_()
        module(leaf).backward(grad)
        results[name] = (leaf.grad.double(), module.weight.grad.double())
    x64, w64 = x.double().requires_grad_(), hf.weight.detach().double().requires_grad_()
    exact_rms_norm(x64, w64, 1e-6).backward(grad.double())
    results["float64"] = (x64.grad, w64.grad)
    for k, what in enumerate(("dx", "dweight")):
        want = results["float64"][k]
        ours_err, hf_err = ((results[n][k] - want).abs().max().item() for n in ("pyrms", "hf"))
        assert_close_to(results["pyrms"][k], want, dtype, what)
        # pyrms works in fp32 and rounds once; HF's autograd rounds its bf16 intermediates too
        if dtype == torch.bfloat16:
            assert ours_err <= hf_err + 2**-9 * want.abs().max().item(), (what, ours_err, hf_err)
