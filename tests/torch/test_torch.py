"""pyrms.torch without a GPU: dtype mapping and error messages, the fake (meta) implementations,
tracing by dynamo (fullgraph) and make_fx, the autograd wiring (with the launches stubbed), the
modules' state dicts and replace_norms on stand-ins for Hugging Face's classes (transformers is
not needed here; the GPU tests use the real ones)."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import importlib  # noqa: E402

import pyrms.torch as pt  # noqa: E402
from pyrms.ops import registry  # noqa: E402


def binding(op):
    """The module that binds ``op`` for PyTorch, as the registry names it (pyrms.torch has imported it)."""
    return importlib.import_module(registry.get(op).torch)


BF16 = torch.bfloat16


def cpu(*shape, dtype=BF16):
    return torch.randn(*shape).to(dtype)


# --- dtypes and errors: all raised before any driver call, so they hold without a GPU -------------


def test_dtype_names():
    from pyrms.torch._layout import DTYPE_NAMES

    assert DTYPE_NAMES == {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


@pytest.mark.parametrize("dtype", [torch.float64, torch.int8])
def test_unsupported_dtype_is_a_type_error_naming_it(dtype):
    x, w = cpu(2, 8, dtype=dtype), cpu(8, dtype=dtype)
    message = f"x has dtype {dtype}; pyrms.torch supports torch.bfloat16, torch.float16 or torch.float32"
    for call in (lambda: pt.rms_norm(x, w), lambda: pt.layer_norm(x, w), lambda: pt.fused_add_rms_norm(x, x.clone(), w)):
        with pytest.raises(TypeError, match=message):
            call()


@pytest.mark.parametrize("requires_grad", [False, True])  # the launch straight away, and under autograd
def test_cpu_tensors_are_refused(requires_grad):
    x, w = cpu(2, 8).requires_grad_(requires_grad), cpu(8)
    with pytest.raises(ValueError, match=r"x is a cpu tensor; pyrms.torch runs on CUDA tensors only \(move it with x.cuda\(\)\)"):
        pt.rms_norm(x, w, 1e-6)
    with pytest.raises(ValueError, match="x is a cpu tensor"):
        pt.layer_norm(x, w, None, 1e-5)
    with torch.no_grad():
        with pytest.raises(ValueError, match="x is a cpu tensor"):
            pt.fused_add_rms_norm(x, cpu(2, 8), w)


def test_bad_operands_are_named():
    x = cpu(3, 8)
    cases = [
        ((x, cpu(8, dtype=torch.float64)), TypeError,  # a weight of another dtype is fine, if pyrms supports it
         r"weight has dtype torch.float64; pyrms.torch supports torch.bfloat16, torch.float16 or torch.float32"),
        ((x, cpu(7)), ValueError, r"weight has shape \(7,\), expected \(8,\): the size of x's last dimension"),
        ((x, cpu(8, 2)[:, 0]), ValueError, "weight must be contiguous"),
        ((x, cpu(1, 8)), ValueError, r"weight has shape \(1, 8\), expected \(8,\)"),
        ((torch.tensor(1.0, dtype=BF16), cpu(1)), ValueError, "x must have at least one dimension"),
        (([1.0], cpu(8)), TypeError, "x must be a torch.Tensor, got list"),
        ((x, "weight"), TypeError, "weight must be a torch.Tensor, got str"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            pt.rms_norm(*args)
    with torch.no_grad(), pytest.raises(ValueError, match=r"residual has shape \(3, 9\), but x has \(3, 8\)"):
        pt.fused_add_rms_norm(x, cpu(3, 9), cpu(8))
    with pytest.raises(TypeError, match=r"weight has dtype torch.bfloat16 and bias torch.float16, x torch.bfloat16: "
                                        r"the weight and bias share one dtype"):
        pt.layer_norm(x, cpu(8), cpu(8, dtype=torch.float16))
    with pytest.raises(TypeError, match="without a weight the bias is of x's dtype"):
        pt.layer_norm(x, None, cpu(8, dtype=torch.float32))


def test_fused_add_under_autograd_is_refused():
    x, r, w = cpu(2, 8), cpu(2, 8), nn.Parameter(cpu(8))
    with pytest.raises(RuntimeError, match=r"fused_add_rms_norm works in place and has no backward; call it under "
                                           r"torch.no_grad\(\)"):
        pt.fused_add_rms_norm(x, r, w)


# --- fake implementations ------------------------------------------------------------------------


LAYOUTS = {  # (shape, strides) of x
    "2-D": ((5, 16), (16, 1)),
    "3-D": ((2, 3, 16), (48, 16, 1)),
    "1-D": ((16,), (1,)),
    "row slice": ((2, 3, 16), (120, 40, 1)),
    "transposed": ((3, 2, 16), (16, 48, 1)),
    "no rows": ((0, 16), (16, 1)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_fake_outputs(layout):
    shape, strides = LAYOUTS[layout]
    with FakeTensorMode():
        x = torch.empty_strided(shape, strides, dtype=BF16, device="cuda")
        w = torch.empty(16, dtype=BF16, device="cuda")
        contiguous = torch.empty(shape, dtype=BF16, device="cuda").stride()
        rms_dx, rms_dw = torch.ops.pyrms.rms_norm_backward(x, x, w, 1e-6, False)
        ln_dx, ln_dw, ln_db = torch.ops.pyrms.layer_norm_backward(x, x, w, 1e-5, True)
        rows = [torch.ops.pyrms.rms_norm(x, w, 1e-6, False, False), torch.ops.pyrms.layer_norm(x, w, None, 1e-5),
                torch.ops.pyrms.layer_norm(x, w, w, 1e-5), rms_dx, ln_dx]
        assert torch.ops.pyrms.fused_add_rms_norm(x, torch.empty_like(x), w, 1e-6, False, False) is None
    for y in rows:  # like x, rows contiguous
        assert (y.shape, y.stride(), y.dtype, y.device.type) == (shape, contiguous, BF16, "cuda")
    for g in (rms_dw, ln_dw, ln_db):
        assert (g.shape, g.dtype, g.device.type) == ((16,), BF16, "cuda")


def test_fake_checks_dtypes_and_shapes():
    with FakeTensorMode():
        x = torch.empty(2, 16, dtype=torch.float64, device="cuda")
        with pytest.raises(TypeError, match="x has dtype torch.float64"):
            torch.ops.pyrms.rms_norm(x, torch.empty(16, dtype=torch.float64, device="cuda"), 1e-6, False, False)
        with pytest.raises(ValueError, match=r"weight has shape \(8,\), expected \(16,\)"):
            torch.ops.pyrms.layer_norm(x.to(BF16), torch.empty(8, dtype=BF16, device="cuda"), None, 1e-5)


def test_fake_outputs_with_a_weight_of_another_dtype():
    """fp32 master weights beside bf16 activations: the output's dtype is the formula's (fp32 for the default
    rounding and LayerNorm, x's with round_once), each gradient in its tensor's dtype; a bias alone of another
    dtype, or a weight and bias of two dtypes, is refused by the fake too."""
    with FakeTensorMode():
        x = torch.empty(2, 3, 16, dtype=BF16, device="cuda")
        w32, w16 = (torch.empty(16, dtype=d, device="cuda") for d in (torch.float32, torch.float16))
        ops = torch.ops.pyrms
        assert ops.rms_norm(x, w32, 1e-6, False, False).dtype == torch.float32
        assert ops.rms_norm(x, w32, 1e-6, True, True).dtype == BF16
        assert ops.rms_norm(x, w16, 1e-6, False, False).dtype == torch.float32
        assert ops.rms_norm(x.float(), w16, 1e-6, False, True).dtype == torch.float32
        dx, dw = ops.rms_norm_backward(x.float(), x, w32, 1e-6, False)  # the fp32 output's gradient
        assert (dx.dtype, dw.dtype) == (BF16, torch.float32)
        dx, dw = ops.rms_norm_backward(x, x, w16, 1e-6, False)
        assert (dx.dtype, dw.dtype) == (BF16, torch.float16)
        assert ops.layer_norm(x, w32, w32, 1e-5).dtype == torch.float32
        dx, dw, db = ops.layer_norm_backward(x.float(), x, w32, 1e-5, True)
        assert (dx.dtype, dw.dtype, db.dtype) == (BF16, torch.float32, torch.float32)
        with pytest.raises(TypeError, match="share one dtype"):
            ops.layer_norm(x, w32, w16, 1e-5)
        with pytest.raises(TypeError, match="without a weight the bias is of x's dtype"):
            ops.layer_norm(x, None, w32, 1e-5)
        with pytest.raises(TypeError, match=r"grad_out has dtype torch.float32, but x has torch.bfloat16"):
            ops.rms_norm_backward(x.float(), x, w16.to(BF16), 1e-6, False)  # one dtype: no fp32 gradient


# --- tracing ---------------------------------------------------------------------------------------


def test_dynamo_fullgraph_traces_the_functions_and_modules_into_pyrms_ops(dynamo):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    norm = pt.RMSNorm(8, 1e-5, dtype=BF16)

    def f(x, r, w, b):
        y = pt.rms_norm(x, w, 1e-6, round_once=True)
        pt.fused_add_rms_norm(x, r, w, 1e-6)
        return y, pt.layer_norm(x, w, b, 1e-5), norm(r)

    compiled = torch.compile(f, backend=capture, fullgraph=True)
    with pytest.raises(ValueError, match="x is a cpu tensor"):  # traced fine; the launch then refuses CPU tensors
        compiled(cpu(4, 8), cpu(4, 8), cpu(8), cpu(8))
    code = graphs[0].code
    assert "torch.ops.pyrms.rms_norm.default(l_x_, l_w_, 1e-06, False, True)" in code
    assert "torch.ops.pyrms.fused_add_rms_norm.default(l_x_, l_r_, l_w_, 1e-06, False, False, None)" in code
    assert "torch.ops.pyrms.layer_norm.default(l_x_, l_w_, l_b_, 1e-05, False)" in code
    assert code.count("torch.ops.pyrms.rms_norm.default(") == 2  # the module's call too


def test_dispatch_modes_see_the_ops():
    # Under a TorchDispatchMode the functions call the custom ops, which the mode sees (a launch through
    # raw pointers would be invisible to it); fake tensors have no data to launch on anyway.
    with FakeTensorMode():
        x, w = torch.empty(3, 8, dtype=BF16, device="cuda"), torch.empty(8, dtype=BF16, device="cuda")
        assert pt.rms_norm(x, w).shape == (3, 8) and pt.layer_norm(x, w, w).shape == (3, 8)
        assert pt.fused_add_rms_norm(x, torch.empty_like(x), w) is None

    def f(x, w, r):
        pt.fused_add_rms_norm(x, r, w, 1e-5)
        return pt.rms_norm(x, w, 1e-6, gemma=True), pt.layer_norm(x, w, None)

    code = make_fx(f, tracing_mode="fake")(cpu(3, 8), cpu(8), cpu(3, 8)).code
    assert "torch.ops.pyrms.fused_add_rms_norm.default(x_1, r_1, w_1, 1e-05, False, False)" in code
    assert "torch.ops.pyrms.rms_norm.default(x_1, w_1, 1e-06, True, False)" in code
    assert "torch.ops.pyrms.layer_norm.default(x_1, w_1, None, 1e-05)" in code


def test_make_fx_traces_the_backward_through_pyrms_kernels():
    def grads(x, w, b):
        y = torch.ops.pyrms.rms_norm(x, w, 1e-6, True, False)
        z = torch.ops.pyrms.layer_norm(x, w, b, 1e-5)
        return torch.autograd.grad((y, z), (x, w, b), (torch.ones_like(y), torch.ones_like(z)))

    x, w = cpu(4, 8).requires_grad_(), cpu(8).requires_grad_()
    code = make_fx(grads, tracing_mode="fake")(x, w, cpu(8).requires_grad_()).code
    assert "torch.ops.pyrms.rms_norm_backward.default(ones_like, x_1, w_1, 1e-06, True)" in code
    assert "torch.ops.pyrms.layer_norm_backward.default(ones_like_1, x_1, w_1, 1e-05, True)" in code


# --- routing and autograd, with the launches stubbed ---------------------------------------------


@pytest.fixture
def stub_launches(monkeypatch):
    """Launches replaced by torch arithmetic on CPU tensors, recording each call."""
    calls = []

    def forward(x, weight, eps, gemma, round_once):
        calls.append(("rms_norm", eps, gemma, round_once))
        return x * (1 if weight is None else weight)

    def backward(grad_out, x, weight, eps, gemma, rstd=None):
        assert rstd is None, "CPU tensors run the launch's general path, which saves no rstd"
        calls.append(("rms_norm_backward", eps, gemma))
        return grad_out * 2, x.new_full((x.shape[-1] if weight is not None else 0,), 3)

    def ln_backward(grad_out, x, weight, eps, has_bias, rms=False, mean=None, rstd=None):
        assert mean is None and rstd is None, "CPU tensors run the launch, which saves no statistics"
        calls.append(("layer_norm_backward", eps, weight is not None, has_bias))
        hidden = x.shape[-1]
        return grad_out * 4, x.new_full((hidden if weight is not None else 0,), 5), x.new_full((hidden if has_bias else 0,), 6)

    monkeypatch.setattr(binding("rms_norm"), "launch", forward)
    monkeypatch.setattr(binding("rms_norm_backward"), "launch", backward)
    monkeypatch.setattr(binding("layer_norm"), "launch", lambda x, weight, bias, eps, rms=False: x * (1 if weight is None else weight))
    monkeypatch.setattr(binding("layer_norm_backward"), "launch_backward", ln_backward)
    return calls


def test_eager_without_autograd_goes_straight_to_the_launch(stub_launches):
    x, w = cpu(2, 8), nn.Parameter(cpu(8))
    with torch.no_grad():
        assert pt.rms_norm(x, w, 1e-5, gemma=True).grad_fn is None
    assert pt.rms_norm(x, w.detach()).grad_fn is None  # grad mode on, but nothing requires grad
    assert stub_launches == [("rms_norm", 1e-5, True, False), ("rms_norm", 1e-6, False, False)]


def test_autograd_runs_pyrms_backward(stub_launches):
    x, w = cpu(2, 8).requires_grad_(), nn.Parameter(cpu(8))
    y = pt.rms_norm(x, w, 1e-5, gemma=True, round_once=True)
    grad = cpu(2, 8)
    y.backward(grad)
    assert stub_launches == [("rms_norm", 1e-5, True, True), ("rms_norm_backward", 1e-5, True)]
    assert torch.equal(x.grad, grad * 2) and torch.equal(w.grad, torch.full_like(w, 3))


def test_second_derivatives_raise(stub_launches):
    x, w, grad = cpu(2, 8).requires_grad_(), nn.Parameter(cpu(8)), cpu(2, 8).requires_grad_()
    (dx,) = torch.autograd.grad(pt.rms_norm(x, w), x, grad, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dx.sum().backward()


@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_autograd(stub_launches, with_bias):
    x, w = cpu(2, 8).requires_grad_(), nn.Parameter(cpu(8))
    b = nn.Parameter(cpu(8)) if with_bias else None
    pt.layer_norm(x, w, b, 1e-4).sum().backward()
    assert stub_launches == [("layer_norm_backward", 1e-4, True, with_bias)]
    assert torch.equal(x.grad, torch.full_like(x, 4)) and torch.equal(w.grad, torch.full_like(w, 5))
    if with_bias:
        assert torch.equal(b.grad, torch.full_like(b, 6))


# --- modules -------------------------------------------------------------------------------------


class LlamaRMSNorm(nn.Module):
    """The attributes of transformers' LlamaRMSNorm (the name is what replace_norms matches)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps


class Qwen3RMSNorm(LlamaRMSNorm):
    pass


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))


class FloatLayerNorm(nn.LayerNorm):
    """A subclass that may compute otherwise (as some models' fp32 LayerNorms do): left alone."""


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(16, 16)
        self.q_norm = Qwen3RMSNorm(4, eps=1e-5)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(16, eps=1e-5)
        self.self_attn = Attention()
        self.ln = nn.LayerNorm(16, eps=1e-4)
        self.ln_no_bias = nn.LayerNorm(16, bias=False)
        self.ln_no_affine = nn.LayerNorm(16, elementwise_affine=False)
        self.ln_2d = nn.LayerNorm((4, 4))
        self.ln_fp32 = FloatLayerNorm(16)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.norm = GemmaRMSNorm(16)
        for p in self.parameters():
            nn.init.normal_(p)


@pytest.mark.parametrize("how", ["call", "apply"])
def test_replace_norms_swaps_hf_norms_and_layer_norms_keeping_their_parameters(how):
    model = Model()
    before = model.state_dict(keep_vars=True)
    if how == "call":
        report = pt.replace_norms(model)
        assert report.model is model
    else:
        model.apply(pt.replace_norms)
    after = model.state_dict(keep_vars=True)
    assert list(after) == list(before) and all(after[k] is before[k] for k in before)  # the same Parameters
    for layer in model.layers:
        assert type(layer.input_layernorm) is pt.RMSNorm and layer.input_layernorm.eps == 1e-5
        assert type(layer.self_attn.q_norm) is pt.RMSNorm and layer.self_attn.q_norm.hidden_size == 4
        assert not (layer.input_layernorm.gemma or layer.input_layernorm.round_once)
        assert type(layer.ln) is pt.LayerNorm and layer.ln.eps == 1e-4 and layer.ln.bias is not None
        assert type(layer.ln_no_bias) is pt.LayerNorm and layer.ln_no_bias.bias is None
        assert type(layer.ln_no_affine) is pt.LayerNorm and layer.ln_no_affine.weight is None is layer.ln_no_affine.bias
        assert type(layer.ln_2d) is nn.LayerNorm
        assert type(layer.ln_fp32) is FloatLayerNorm and type(layer.self_attn.q_proj) is nn.Linear
    assert type(model.norm) is pt.RMSNorm and model.norm.gemma and model.norm.round_once and model.norm.eps == 1e-6
    if how == "call":  # what the report says of it
        assert [(s.path, s.was) for s in report.swapped] == [
            (f"layers.{i}.{name}", cls) for i in (0, 1) for name, cls in (  # in named_modules' order
                ("input_layernorm", "LlamaRMSNorm"), ("self_attn.q_norm", "Qwen3RMSNorm"), ("ln", "LayerNorm"),
                ("ln_no_bias", "LayerNorm"), ("ln_no_affine", "LayerNorm"))] + [("norm", "GemmaRMSNorm")]
        assert report.swapped[-1].now == "RMSNorm(16, eps=1e-06, gemma=True, round_once=True)"
        assert [(k.path, k.class_name, k.reason.split(";")[0]) for k in report.kept] == [
            (f"layers.{i}.{name}", cls, reason) for i in (0, 1) for name, cls, reason in (
                ("ln_2d", "LayerNorm", "it normalizes over its last 2 dimensions (4, 4)"),
                ("ln_fp32", "FloatLayerNorm", "a subclass of torch.nn.LayerNorm, which may compute something else"))]
        assert str(report).splitlines()[:2] == ["replace_norms swapped 11 norms, kept 4:",
                                                "  2 x LlamaRMSNorm -> RMSNorm(16, eps=1e-05)"]
        again = pt.replace_norms(model)  # pyrms's own modules are not norms to swap again, nor to report
        assert (again.swapped, again.kept) == ((), report.kept)


def test_replace_norms_of_a_norm_returns_its_replacement():
    norm = LlamaRMSNorm(8, eps=1e-5)
    report = pt.replace_norms(norm)
    new = report.model
    assert type(new) is pt.RMSNorm and new.weight is norm.weight and new.variance_epsilon == 1e-5
    assert [(s.path, s.was, s.now) for s in report.swapped] == [("", "LlamaRMSNorm", "RMSNorm(8, eps=1e-05)")]


def test_the_modules_replace_norms_swaps_in_are_pyrms_torchs():
    """Every module a decision of pyrms.model_norms names is registered (swaps_in) and exported by pyrms.torch,
    wherever it is defined (beside its op's binding); a user's subclass of one is not registered."""
    from pyrms.torch import modules

    assert {name: cls.__module__ for name, cls in modules._SWAPS_IN.items()} == {
        "RMSNorm": registry.get("rms_norm").torch, "LayerNorm": registry.get("layer_norm").torch}
    assert all(name in pt.__all__ and getattr(pt, name) is cls for name, cls in modules._SWAPS_IN.items())

    class RMSNorm(pt.RMSNorm):  # the same name, not registered: replace_norms still builds pyrms's
        pass

    assert type(pt.replace_norms(nn.RMSNorm(4)).model) is pt.RMSNorm
    assert type(pt.replace_norms(RMSNorm(4)).model) is RMSNorm  # pyrms's own (a subclass of one): left alone


class Olmo2RMSNorm(LlamaRMSNorm):
    """transformers' Olmo2RMSNorm keeps LLaMA's attributes and computes (weight * x_hat).to(x.dtype)."""


class Gemma4RMSNorm(nn.Module):
    """transformers' Gemma4RMSNorm: eps, with_scale, and a weight only with_scale."""

    def __init__(self, dim, eps=1e-6, with_scale=True):
        super().__init__()
        self.eps, self.with_scale = eps, with_scale
        if with_scale:
            self.weight = nn.Parameter(torch.ones(dim))


def test_replace_norms_takes_torch_rms_norm_and_each_formula():
    shared = LlamaRMSNorm(8)
    model = nn.ModuleDict({
        "torch": nn.RMSNorm(8), "torch_eps": nn.RMSNorm(8, eps=1e-5, elementwise_affine=False),
        "torch_2d": nn.RMSNorm((2, 4)), "olmo": Olmo2RMSNorm(8), "gemma4": Gemma4RMSNorm(8, eps=1e-5),
        "v_norm": Gemma4RMSNorm(8, with_scale=False), "a": nn.Sequential(shared), "b": nn.Sequential(shared),
        "patched": LlamaRMSNorm(8)})
    model["patched"].forward = lambda x: x  # as Liger-Kernel's patches bind a forward on the instance
    torch_weight = model["torch"].weight
    report = pt.replace_norms(model)
    got = {k: (m.eps, m.gemma, m.round_once, m.weight is None) for k, m in model.items() if type(m) is pt.RMSNorm}
    assert got == {"torch": (2.0 ** -23, False, True, False), "torch_eps": (1e-5, False, True, True),
                   "olmo": (1e-6, False, True, False), "gemma4": (1e-5, False, True, False),
                   "v_norm": (1e-6, False, True, True)}
    assert model["torch"].weight is torch_weight and report.model is model
    assert model["v_norm"].hidden_size is None and repr(model["v_norm"]) == (
        "RMSNorm(None, eps=1e-06, round_once=True, elementwise_affine=False)")
    assert model["a"][0] is model["b"][0] and type(model["a"][0]) is pt.RMSNorm  # one replacement for a shared norm
    assert [s.path for s in report.swapped].count("a.0") == 1 and "b.0" not in [s.path for s in report.swapped]
    assert {(k.path, k.class_name) for k in report.kept} == {("torch_2d", "RMSNorm"), ("patched", "LlamaRMSNorm")}
    assert type(model["torch_2d"]) is nn.RMSNorm and type(model["patched"]) is LlamaRMSNorm


def test_rms_norm_loads_hf_state_dicts_as_they_are():
    hf = LlamaRMSNorm(8, eps=1e-5)
    nn.init.normal_(hf.weight)
    ours = pt.RMSNorm(8, eps=1e-5, dtype=torch.float32)
    assert list(ours.state_dict()) == ["weight"]
    ours.load_state_dict(hf.state_dict(), strict=True)
    assert torch.equal(ours.weight, hf.weight)
    ours.variance_epsilon = 1e-3
    assert ours.eps == 1e-3
    assert torch.equal(pt.RMSNorm(4, gemma=True).weight, torch.zeros(4))  # 1 + weight scales by one
    assert repr(pt.RMSNorm(4, gemma=True, round_once=True)) == "RMSNorm(4, eps=1e-06, gemma=True, round_once=True)"
    with pytest.raises(TypeError, match=r"Linear is not an RMSNorm that pyrms can take over: its weight Parameter "
                                        r"has shape \(2, 2\), not \(hidden_size,\)"):
        pt.RMSNorm.from_module(nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"LayerNorm is not an RMSNorm that pyrms can take over: it is a "
                                        r"torch.nn.LayerNorm"):
        pt.RMSNorm.from_module(nn.LayerNorm(8))
    custom = pt.RMSNorm.from_module(LlamaRMSNorm(8), gemma=True)  # options given override the class's
    assert custom.gemma and not custom.round_once
    with pytest.raises(ValueError, match="hidden_size=None leaves the weight without a size"):
        pt.RMSNorm(None)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_loads_nn_layer_norm_state_dicts(bias):
    theirs = nn.LayerNorm(8, eps=1e-3, bias=bias)
    for p in theirs.parameters():
        nn.init.normal_(p)
    ours = pt.LayerNorm(8, eps=1e-3, bias=bias)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    assert (ours.normalized_shape, ours.eps, ours.elementwise_affine) == ((8,), 1e-3, True)


def test_layer_norm_without_a_kernel_is_not_implemented():
    with pytest.raises(NotImplementedError, match="last dimension only"):
        pt.LayerNorm((2, 8))


# --- without a weight (torch.nn.RMSNorm / LayerNorm with elementwise_affine=False) ----------------


def test_fake_outputs_without_weight():
    with FakeTensorMode():
        x = torch.empty(2, 3, 16, dtype=BF16, device="cuda")
        rows = [torch.ops.pyrms.rms_norm(x, None, 1e-6, False, True), torch.ops.pyrms.layer_norm(x, None, None, 1e-5)]
        rms_dx, rms_dw = torch.ops.pyrms.rms_norm_backward(x, x, None, 1e-6, False)
        ln_dx, ln_dw, ln_db = torch.ops.pyrms.layer_norm_backward(x, x, None, 1e-5, False)
        _, _, with_db = torch.ops.pyrms.layer_norm_backward(x, x, None, 1e-5, True)
    for y in (*rows, rms_dx, ln_dx):
        assert (y.shape, y.dtype, y.device.type) == ((2, 3, 16), BF16, "cuda")
    for empty in (rms_dw, ln_dw, ln_db):  # not computed: empty, as a custom op cannot return None
        assert (empty.shape, empty.dtype) == ((0,), BF16)
    assert with_db.shape == (16,)


def test_bad_operands_without_weight_are_named():
    with pytest.raises(ValueError, match="x is a cpu tensor"):
        pt.rms_norm(cpu(2, 8), None)
    with pytest.raises(ValueError, match="x is a cpu tensor"):
        pt.layer_norm(cpu(2, 8).requires_grad_(), None, None)
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        pt.rms_norm(cpu(2, 8, dtype=torch.float64), None)


def test_tracing_without_weight(dynamo):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x, b):
        return pt.rms_norm(x, None, 1e-6), pt.layer_norm(x, None, b), pt.layer_norm(x, None)

    with pytest.raises(ValueError, match="x is a cpu tensor"):
        torch.compile(f, backend=capture, fullgraph=True)(cpu(4, 8), cpu(8))
    code = graphs[0].code
    assert "torch.ops.pyrms.rms_norm.default(l_x_, None, 1e-06, False, False)" in code
    assert "torch.ops.pyrms.layer_norm.default(l_x_, None, l_b_, 1e-05, False)" in code
    assert "torch.ops.pyrms.layer_norm.default(l_x_, None, None, 1e-05, False)" in code

    def grads(x, b):
        y = torch.ops.pyrms.rms_norm(x, None, 1e-6, False, False)
        z = torch.ops.pyrms.layer_norm(x, None, b, 1e-5)
        return torch.autograd.grad((y, z), (x, b), (torch.ones_like(y), torch.ones_like(z)))

    code = make_fx(grads, tracing_mode="fake")(cpu(4, 8).requires_grad_(), cpu(8).requires_grad_()).code
    assert "torch.ops.pyrms.rms_norm_backward.default(ones_like, x_1, None, 1e-06, False)" in code
    assert "torch.ops.pyrms.layer_norm_backward.default(ones_like_1, x_1, None, 1e-05, True)" in code


def test_autograd_without_weight(stub_launches):
    x = cpu(2, 8).requires_grad_()
    grad = cpu(2, 8)
    pt.rms_norm(x, None, 1e-5).backward(grad)
    assert stub_launches == [("rms_norm", 1e-5, False, False), ("rms_norm_backward", 1e-5, False)]
    assert torch.equal(x.grad, grad * 2)
    stub_launches.clear()
    for bias in (None, nn.Parameter(cpu(8))):
        x = cpu(2, 8).requires_grad_()
        pt.layer_norm(x, None, bias, 1e-4).sum().backward()
        assert stub_launches[-1] == ("layer_norm_backward", 1e-4, False, bias is not None)
        assert torch.equal(x.grad, torch.full_like(x, 4))
        if bias is not None:
            assert torch.equal(bias.grad, torch.full_like(bias, 6))
    # a bias alone requiring grad is recorded too
    b = nn.Parameter(cpu(8))
    assert pt.layer_norm(cpu(2, 8), None, b).grad_fn is not None


def test_modules_without_weight(stub_launches):
    rms = pt.RMSNorm(8, 1e-5, elementwise_affine=False)
    assert rms.weight is None and list(rms.state_dict()) == [] and list(rms.parameters()) == []
    assert repr(rms) == "RMSNorm(8, eps=1e-05, elementwise_affine=False)"
    x = cpu(2, 8).requires_grad_()
    rms(x).sum().backward()
    assert stub_launches == [("rms_norm", 1e-5, False, False), ("rms_norm_backward", 1e-5, False)]
    with pytest.raises(ValueError, match="gemma scales by 1 \\+ weight, so it needs a weight"):
        pt.RMSNorm(8, gemma=True, elementwise_affine=False)
    theirs = nn.LayerNorm(8, elementwise_affine=False)
    ours = pt.LayerNorm(8, elementwise_affine=False)
    assert ours.weight is None and ours.bias is None and list(ours.state_dict()) == list(theirs.state_dict()) == []
    assert repr(ours) == "LayerNorm((8,), eps=1e-05, elementwise_affine=False, bias=False)"
    swapped = pt.LayerNorm.from_module(theirs)
    assert swapped.weight is None and swapped.bias is None and not swapped.elementwise_affine
    assert type(pt.replace_norms(nn.LayerNorm(8, elementwise_affine=False, bias=True)).model) is pt.LayerNorm


# --- the quantizing ops (rms_norm_quant, fused_add_rms_norm_quant) ----------------------------------

_quant = binding("rms_norm_quant")

F8, F8E5, I8 = torch.float8_e4m3fn, torch.float8_e5m2, torch.int8
QUANT_LAYOUTS = {  # (shape, strides) of x, hidden 256 (two groups of 128, four of 64)
    "2-D": ((5, 256), (256, 1)),
    "3-D": ((2, 3, 256), (768, 256, 1)),
    "1-D": ((256,), (1,)),
    "row slice": ((2, 3, 256), (900, 300, 1)),
    "transposed": ((3, 2, 256), (256, 768, 1)),
    "no rows": ((0, 256), (256, 1)),
}
QUANT_OPTIONS = {  # the functions' keyword arguments -> the scales' shape past x's leading ones, their layout
    "static": (dict(scale=0.5), None, None),
    "static int8, device scale": (dict(out_dtype=I8, scale="tensor"), None, None),
    "per_token": (dict(mode="per_token", out_dtype=F8E5, scale_ub=2.0), (1,), "rows"),
    "per_group": (dict(mode="per_group"), (2,), "rows"),
    "per_group 64 column-major": (dict(mode="per_group", group_size=64, column_major_scales=True), (4,), 1),
    "per_group tma-aligned": (dict(mode="per_group", out_dtype=I8, ue8m0=True, column_major_scales=True,
                                   tma_aligned_scales=True), (2,), 4),
}


def quant_kwargs(name, device="cuda"):
    kwargs, _, _ = QUANT_OPTIONS[name]
    if kwargs.get("scale") == "tensor":
        kwargs = {**kwargs, "scale": torch.full((1,), 0.5, device=device)}
    return kwargs


def expected_scales(lead, per_row, layout):
    """(shape, strides) of the scales: rows contiguous, or column-major over the flattened rows, padded to a
    multiple of `layout` (1: none; 4: tma_aligned_scales)."""
    shape = (*lead, *per_row)
    if layout == "rows":
        return shape, torch.empty(shape).stride()
    rows = 1
    for size in lead:
        rows *= size
    return shape, (*torch.empty(lead).stride(), -(-rows // layout) * layout)


def check_quant_returns(got, x, name, norm_out):
    kwargs, per_row, layout = QUANT_OPTIONS[name]
    got = got if isinstance(got, tuple) else (got,)
    contiguous = torch.empty(x.shape).stride()
    q, rest = got[0], got[1:]
    assert (q.shape, q.stride(), q.dtype, q.device.type) == (x.shape, contiguous, kwargs.get("out_dtype", F8), "cuda")
    if per_row is not None:
        s, rest = rest[0], rest[1:]
        assert (s.shape, s.stride(), s.dtype) == (*expected_scales(x.shape[:-1], per_row, layout), torch.float32), name
    if norm_out:
        (y,) = rest
        assert (y.shape, y.stride(), y.dtype, y.device.type) == (x.shape, contiguous, BF16, "cuda")
    else:
        assert rest == ()


@pytest.mark.parametrize("layout", list(QUANT_LAYOUTS))
def test_quant_fake_outputs(layout):
    """Under FakeTensorMode the functions call the custom ops, whose fake implementations give every return its
    shape, dtype and strides: q and norm_out like x with rows contiguous, the scales in their layout."""
    shape, strides = QUANT_LAYOUTS[layout]
    with FakeTensorMode():
        x = torch.empty_strided(shape, strides, dtype=BF16, device="cuda")
        w = torch.empty(256, dtype=BF16, device="cuda")
        for name in QUANT_OPTIONS:
            for norm_out in (False, True):
                kwargs = quant_kwargs(name)
                check_quant_returns(pt.rms_norm_quant(x, w, 1e-6, norm_out=norm_out, **kwargs), x, name, norm_out)
                residual = torch.empty(shape, dtype=BF16, device="cuda")
                check_quant_returns(pt.fused_add_rms_norm_quant(x, residual, w, 1e-6, norm_out=norm_out, **kwargs),
                                    x, name, norm_out)


def test_quant_ops_return_three_tensors_empty_where_not_asked_for():
    with FakeTensorMode():
        x, w = torch.empty(4, 128, dtype=BF16, device="cuda"), torch.empty(128, dtype=BF16, device="cuda")
        q, scales, normed = torch.ops.pyrms.rms_norm_quant(x, w, 1e-6, I8, "static", 0.5, None, None, None, None, False,
                                                           False, False, False, False)
        _, _, normed_too = torch.ops.pyrms.fused_add_rms_norm_quant(x, torch.empty_like(x), w, 1e-6, F8, "per_token",
                                                                    None, None, None, None, None, False, False, False,
                                                                    True, True)
    assert (q.dtype, scales.shape, scales.dtype, normed.shape, normed.dtype) == (I8, (0,), torch.float32, (0,), BF16)
    assert (normed_too.shape, normed_too.dtype) == ((4, 128), BF16)


def test_quant_dynamo_fullgraph_traces_the_ops_with_fake_strides(dynamo):
    """torch.compile(fullgraph=True) traces the functions into the custom ops, scale tensors as graph inputs;
    the fake values dynamo propagates have the strides the real outputs have."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x, r, w, s):
        q = pt.rms_norm_quant(x, w, 1e-6, scale=s)
        q2, scales, y = pt.rms_norm_quant(x, w, 1e-6, mode="per_group", column_major_scales=True,
                                          tma_aligned_scales=True, norm_out=True)
        q3, token_scales = pt.fused_add_rms_norm_quant(x, r, w, 1e-6, mode="per_token", scale_ub=2.0, out_dtype=F8E5)
        return q, q2, scales, y, q3, token_scales

    with pytest.raises(ValueError, match="x is a cpu tensor"):  # traced fine; the launch then refuses CPU tensors
        torch.compile(f, backend=capture, fullgraph=True)(cpu(5, 256), cpu(5, 256), cpu(256), torch.ones(1))
    gm = graphs[0]
    code = gm.code
    assert ("torch.ops.pyrms.rms_norm_quant.default(l_x_, l_w_, 1e-06, torch.float8_e4m3fn, 'static', None, l_s_, "
            "None, None, None, False, False, False, False, False)") in code
    assert ("torch.ops.pyrms.rms_norm_quant.default(l_x_, l_w_, 1e-06, torch.float8_e4m3fn, 'per_group', None, None, "
            "None, None, None, False, True, True, False, True)") in code
    assert ("torch.ops.pyrms.fused_add_rms_norm_quant.default(l_x_, l_r_, l_w_, 1e-06, torch.float8_e5m2, 'per_token', "
            "None, None, 2.0, None, None, False, False, False, False, False, None)") in code
    (returned,) = [n for n in gm.graph.nodes if n.op == "output"][0].args
    metas = [(tuple(v.shape), v.stride(), v.dtype) for v in (n.meta["example_value"] for n in returned)]
    assert metas == [((5, 256), (256, 1), F8), ((5, 256), (256, 1), F8), ((5, 2), (1, 8), torch.float32),
                     ((5, 256), (256, 1), BF16), ((5, 256), (256, 1), F8E5), ((5, 1), (1, 1), torch.float32)]


def test_quant_make_fx_sees_the_ops():
    def f(x, r, w):
        q, s = pt.rms_norm_quant(x, w, 1e-5, mode="per_group", group_size=64, ue8m0=True)
        return q, s, pt.fused_add_rms_norm_quant(x, r, w, 1e-6, scale=0.25, out_dtype=I8, round_input=True)

    code = make_fx(f, tracing_mode="fake")(cpu(3, 128), cpu(3, 128), cpu(128)).code
    assert ("torch.ops.pyrms.rms_norm_quant.default(x_1, w_1, 1e-05, torch.float8_e4m3fn, 'per_group', None, None, "
            "None, None, 64, True, False, False, False, False)") in code
    assert "torch.ops.pyrms.fused_add_rms_norm_quant.default(x_1, r_1, w_1, 1e-06, torch.int8, 'static', 0.25" in code


@pytest.fixture
def stub_quant(monkeypatch):
    """The quantizing launch replaced by its fake (zeroed outputs) on CPU tensors, recording each call's options."""
    calls = []

    def launch(x, weight, residual, *options):
        calls.append((residual is not None, *options))
        return tuple(t.zero_() for t in _quant.fake(x, weight, residual, *options))

    monkeypatch.setattr(_quant, "launch", launch)
    return calls


def test_quant_opcheck(stub_quant):
    """torch.library.opcheck on the custom ops, with the launch stubbed: schema, fake implementation and
    AOT dispatch with dynamic shapes (which once failed on an argument named `mode`: auto_functionalized
    takes one of its own)."""
    x, w = cpu(3, 5, 256), cpu(256)
    plain = (None, None, None, None, None, False, False, False, False, False)
    for args in [(x, w, 1e-6, F8, "per_group", None, None, None, None, None, False, True, True, False, True),
                 (x, w, 1e-6, I8, "static", 0.5, *plain[1:])]:
        torch.library.opcheck(torch.ops.pyrms.rms_norm_quant.default, args)
    torch.library.opcheck(torch.ops.pyrms.fused_add_rms_norm_quant.default,
                          (x, x.clone(), w, 1e-6, F8E5, "per_token", None, None, None, torch.ones(1), None, False,
                           False, False, True, True))


def test_quant_eager_goes_straight_to_the_launch(stub_quant, monkeypatch):
    def no_op(*args):
        raise AssertionError("the custom op was called")

    monkeypatch.setattr(_quant, "_RMS_NORM_QUANT", no_op)
    monkeypatch.setattr(_quant, "_FUSED_ADD_RMS_NORM_QUANT", no_op)
    x, r, w, s = cpu(2, 128), cpu(2, 128), cpu(128), torch.ones(1)
    q = pt.rms_norm_quant(x, w, 1e-5, scale=1)  # an int scale is a value, never a pointer
    assert isinstance(q, torch.Tensor) and q.dtype == F8 and q.grad_fn is None
    q, y = pt.rms_norm_quant(x, w, scale=s, norm_out=True)
    q, scales = pt.rms_norm_quant(x, nn.Parameter(w).detach(), mode="per_token", scale_ub=s)  # nothing requires grad
    version = r._version
    with torch.no_grad():
        q, scales, y = pt.fused_add_rms_norm_quant(x, r, nn.Parameter(w), mode="per_group", out_dtype=I8,
                                                   norm_out=True)
    assert r._version > version  # autograd knows the residual changed
    assert stub_quant == [
        (False, 1e-5, F8, "static", 1.0, None, None, None, None, False, False, False, False, False),
        (False, 1e-6, F8, "static", None, s, None, None, None, False, False, False, False, True),
        (False, 1e-6, F8, "per_token", None, None, None, s, None, False, False, False, False, False),
        (True, 1e-6, I8, "per_group", None, None, None, None, None, False, False, False, False, True, None),
    ]
    assert type(stub_quant[0][4]) is float


def test_quant_under_autograd(stub_quant):
    """Not differentiable: as torch does for a custom op without an autograd formula, rms_norm_quant's floating
    outputs are recorded and a backward through them raises; fused_add_rms_norm_quant, in place, refuses."""
    x, w = cpu(2, 128), nn.Parameter(cpu(128))
    q, scales, y = pt.rms_norm_quant(x, w, mode="per_token", norm_out=True)
    assert q.requires_grad and scales.requires_grad and y.requires_grad
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        y.float().sum().backward()
    assert not pt.rms_norm_quant(x, w, scale=0.5, out_dtype=I8).requires_grad  # integers never require grad
    with pytest.raises(RuntimeError, match=r"fused_add_rms_norm_quant works in place and has no backward \(quantized "
                                           r"outputs are not differentiable\); call it under torch.no_grad\(\)"):
        pt.fused_add_rms_norm_quant(x, cpu(2, 128), w, scale=0.5)
    with torch.no_grad():
        assert not pt.rms_norm_quant(x, w, scale=0.5).requires_grad
    assert len(stub_quant) == 3


def test_quant_cpu_tensors_are_refused():
    x, w = cpu(2, 128), cpu(128)
    for call in (lambda: pt.rms_norm_quant(x, w, scale=0.5), lambda: pt.fused_add_rms_norm_quant(x, cpu(2, 128), w,
                                                                                                  mode="per_token")):
        with pytest.raises(ValueError, match=r"x is a cpu tensor; pyrms.torch runs on CUDA tensors only"):
            call()


def test_quant_bad_arguments_are_named():
    x, w = cpu(3, 128), cpu(128)
    cases = [
        (dict(x=cpu(3, 128, dtype=torch.float64), weight=cpu(128, dtype=torch.float64)), TypeError,
         "x has dtype torch.float64; pyrms.torch supports torch.bfloat16, torch.float16 or torch.float32"),
        (dict(weight=cpu(128, dtype=torch.float16)), TypeError,
         "weight has dtype torch.float16, but x has torch.bfloat16"),
        (dict(weight=cpu(64)), ValueError, r"weight has shape \(64,\), expected \(128,\)"),
        (dict(weight=None), TypeError,
         "weight must be a torch.Tensor, got None: the quantizing kernels have no weightless"),
        (dict(out_dtype=torch.float16), TypeError,
         "out_dtype is torch.float16; pyrms.torch quantizes to torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8"),
        (dict(out_dtype="int8"), TypeError, "out_dtype is 'int8'; pyrms.torch quantizes to"),
        (dict(mode="per_tensor"), ValueError,
         r"mode must be one of \('static', 'per_token', 'per_group'\), got 'per_tensor'"),
        (dict(mode="per_group", group_size=96), ValueError, r"group_size must be one of \(64, 128\), got 96"),
        (dict(x=cpu(3, 192), weight=cpu(192), mode="per_group"), ValueError,
         "per_group needs hidden_size a multiple of group_size 128"),
        (dict(mode="per_token", group_size=64), ValueError, "group_size applies to mode='per_group' only"),
        (dict(scale=None), ValueError, r"mode='static' needs a scale \(a float or a one-element float32 tensor\)"),
        (dict(scale="0.5"), TypeError, "scale must be a float or a one-element torch.float32 CUDA tensor, got str"),
        (dict(scale=True), TypeError, "scale must be a float or a one-element torch.float32 CUDA tensor, got bool"),
        (dict(scale=torch.ones(1, dtype=torch.float64)), TypeError,
         "scale as a tensor must be torch.float32, got torch.float64"),
        (dict(scale=torch.ones(2)), ValueError, r"scale as a tensor must hold one element, got shape \(2,\)"),
        (dict(mode="per_token", scale=0.5), ValueError,
         "scale applies to mode='static' only; mode='per_token' computes"),
        (dict(mode="per_group", scale_ub=2.0), ValueError,
         "scale_ub applies to mode='per_token' only, not 'per_group'"),
        (dict(mode="per_token", out_dtype=I8, scale_ub=torch.ones(1)), ValueError,
         "scale_ub applies to float8 outputs only"),
        (dict(mode="per_token", scale_ub=[2.0]), TypeError, "scale_ub must be a float or a one-element"),
        (dict(ue8m0=True), ValueError,
         "ue8m0, column_major_scales and tma_aligned_scales apply to mode='per_group' only"),
        (dict(mode="per_group", tma_aligned_scales=True), ValueError,
         "tma_aligned_scales pads column-major scales: pass column_major_scales=True with it"),
    ]
    for change, error, message in cases:
        args = {"x": x, "weight": w, "scale": 0.5 if change.get("mode", "static") == "static" else None, **change}
        x_of = args.pop("x")
        for call in (lambda: pt.rms_norm_quant(x_of, **args),
                     lambda: pt.fused_add_rms_norm_quant(x_of, torch.empty_like(x_of), **args)):
            with torch.no_grad(), pytest.raises(error, match=message):
                call()
    with torch.no_grad(), pytest.raises(ValueError, match=r"residual has shape \(3, 64\), but x has \(3, 128\)"):
        pt.fused_add_rms_norm_quant(x, cpu(3, 64), w, scale=0.5)
    in_place = r"residual \(shape \(3, 128\), strides \(1, 3\)\) is not a set of rows one stride apart"
    with torch.no_grad(), pytest.raises(ValueError, match=in_place):
        pt.fused_add_rms_norm_quant(x, cpu(128, 3).t(), w, scale=0.5)


# --- the benchmark tools' torch side --------------------------------------------------------------


def test_qk_norm_bench_lets_torch_compile_specialize_to_every_shape(monkeypatch):
    """tools.rms_norm.bench_qk_norm times torch.compile at every (part, tokens) shape; past dynamo's recompile limit
    (8) the compiled function silently runs eagerly, so implementations() raises the limit to the count."""
    from tools.rms_norm import bench_qk_norm

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(config, name, 8)  # restored after the test
    impls = bench_qk_norm.implementations(12)
    assert getattr(config, name) == 12
    assert {"pyrms", "pyrms.torch", "torch eager", "torch.compile"} <= set(impls)
    bench_qk_norm.implementations(4)  # never lowered
    assert getattr(config, name) == 12


def test_fused_add_rms_norm_quant_sum_precision_reaches_the_graph_and_is_checked():
    """sum_precision is the custom op's last argument (traced into the graph as given); the fake implementation
    refuses a value the raw op would, naming it, so torch.compile fails at trace time, not at the launch."""
    def f(x, r, w):
        return pt.fused_add_rms_norm_quant(x, r, w, 1e-6, scale=0.25, sum_precision="fp32")

    code = make_fx(f, tracing_mode="fake")(cpu(3, 128), cpu(3, 128), cpu(128)).code
    assert "'static', 0.25, None, None, None, None, False, False, False, False, False, 'fp32')" in code
    with pytest.raises(ValueError, match="sum_precision must be one of 'rounded', 'fp32' or None, got 'fp64'"):
        make_fx(lambda x, r, w: pt.fused_add_rms_norm_quant(x, r, w, scale=0.25, sum_precision="fp64"),
                tracing_mode="fake")(cpu(3, 128), cpu(3, 128), cpu(128))
