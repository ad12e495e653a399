"""The rest of the family without a GPU: plans, argument validation (before any launch), the cached
workspace's bookkeeping, and what NVRTC makes of every kernel variant for sm_90 (no spills, 16-byte
loads and stores on the aligned path)."""
import re

import numpy as np
import pytest

import pyrms
from pyrms import dtypes
from pyrms.ops import _workspace, registry
from pyrms.tensor import Tensor
from tests.support.kernel_resources import assert_no_spills, compile_with_report
from tests.support.validation_calls import A, B, C, D, E, F, backward
from pyrms.ops.fused_add_rms_norm import plan as fused_plan
from pyrms.ops.layer_norm import plan as ln_plan
from pyrms.ops.layer_norm import twin as ln_twin
from pyrms.ops.rms_norm import plan as rms_plan
from pyrms.ops.rms_norm import twin as rms_twin
from pyrms.ops._norm_backward import plan as bwd_plan

DTYPES = ["bfloat16", "float16", "float32"]


# --- plans ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, hidden, block", [
    ("bfloat16", 1, 32),
    ("bfloat16", 5120, 128),     # 640 vectors, 5 a thread: the H200's best (tune_backward2.log, run2)
    ("bfloat16", 8192, 224),     # 1024 / 5 = 205 threads -> 7 warps
    ("bfloat16", 65536, 512),    # capped at 512 threads, which then loop over 16 vectors each
    ("float32", 5120, 256),
])
def test_backward_block(dtype, hidden, block):
    assert bwd_plan.backward_block(dtypes.get(dtype), hidden) == block


@pytest.mark.parametrize("hidden", [1, 7, 769, 5120, 5125, 16384, 65537])
def test_forward_plans_follow_rms_norm(hidden):
    for dt in dtypes.ALL:
        shape = (rms_plan.plan_rms_norm(dt, hidden).block, rms_plan.plan_rms_norm(dt, hidden).cache)
        fused = fused_plan.plan_fused_add_rms_norm(dt, hidden, gemma=True, round_once=True)
        assert (fused.block, fused.cache) == shape
        assert fused.expression == f"pyrms::fused_add_rms_norm_kernel<{dt.ctype}, {fused.cache}, 1, true, true, false, false>"
        assert fused.expression in fused.group and fused.source == "fused_add_rms_norm.cu"
        ln = ln_plan.plan_layer_norm(dt, hidden)
        assert (ln.block, ln.cache) == shape and ln.expression in ln.group


@pytest.mark.parametrize("hidden", [1, 7, 769, 5120, 5125, 8192, 16384, 65537])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_backward_plan(hidden, layer_norm):
    for dt in dtypes.ALL:
        p = bwd_plan.plan_norm_backward(dt, hidden, centered=layer_norm, grad_dtype="float32")
        assert p.block % 32 == 0 and 32 <= p.block <= bwd_plan.BACKWARD_MAX_BLOCK
        # the forward's fold width: the recomputed statistics are the forward's by construction
        assert p.stats_fold == rms_plan.plan_rms_norm(dt, hidden).block == ln_plan.plan_layer_norm(dt, hidden).block
        assert p.vectors in (0, *bwd_plan.BACKWARD_VECTORS)
        if p.vectors:  # every body vector of any alignment fits in the block's registers
            assert p.block * p.vectors >= -(-hidden // dt.vec_elems)
        assert p.expression in p.group and p.sum_expression == "pyrms::sum_partials_kernel<float>" in p.group
        assert p.ws_stride % 4 == 0 and p.ws_stride >= hidden + 7
        assert p.shared_bytes in (0, p.params * p.ws_stride * 4) and p.shared_bytes <= bwd_plan.SHARED_SUMS_LIMIT
        assert p.workspace_bytes(70001) == p.params * -(-70001 // bwd_plan.GRAD_CHUNK_ROWS) * p.ws_stride * 4
        assert pyrms.backward_workspace_bytes(70001, hidden, layer_norm=layer_norm) == p.workspace_bytes(70001)
        # one row per block (planned up to BACKWARD_FEW_ROWS rows): a workspace row per input row
        few = bwd_plan.BACKWARD_FEW_ROWS
        chunk = p.chunk_for(few + 1)  # fewer rows, smaller chunks (8 or 16 at 4096 rows, by the variant)
        assert p.rows_per_block(few) == 1 and p.rows_per_block(few + 1) == chunk in (8, 16)
        assert p.workspace_bytes(few) == p.params * few * p.ws_stride * 4 == p.workspace_bytes(few, 1)
        assert p.workspace_bytes(few, 32) == p.params * -(-few // p.chunk_for(few)) * p.ws_stride * 4
        assert pyrms.backward_workspace_bytes(40, hidden, layer_norm=layer_norm, rows_per_block=16) == \
            p.workspace_bytes(40, 16)


def test_weight_kinds_name_their_kernels():
    bf16 = dtypes.BFLOAT16
    same = rms_plan.plan_rms_norm(bf16, 5120)
    fp32 = rms_plan.plan_rms_norm(bf16, 5120, weight_dtype="float32")
    none = rms_plan.plan_rms_norm(bf16, 5120, weight_dtype="none")
    assert same.expression == "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, false>"
    assert fp32.expression == "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, false, float>"
    assert none.latency_expression == "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 4, false, false, true, false, void>"
    assert (same.weight_itemsize, fp32.weight_itemsize, none.weight_itemsize) == (2, 4, 0)
    assert all(p.expression in p.group and p.aligned_latency_expression in p.group for p in (same, fp32, none))
    assert not set(same.group) & set(fp32.group) and not set(fp32.group) & set(none.group)  # one unit each
    # the same tree: the weight does not change the fold width
    assert (same.block, same.cache) == (fp32.block, fp32.cache) == (none.block, none.cache)
    assert rms_plan.plan_rms_norm("float32", 64, weight_dtype="float32").weight == "same"
    assert rms_plan.plan_rms_norm(bf16, 64, weight_dtype="bfloat16").weight == "same"
    fused = fused_plan.plan_fused_add_rms_norm(dtypes.FLOAT16, 64, weight_dtype="float32")
    assert fused.expression == "pyrms::fused_add_rms_norm_kernel<__half, 1, 1, false, false, false, false, float>"
    with pytest.raises(ValueError, match="weight dtype must be bfloat16 \\(the input's\\) or float32, got float16"):
        rms_plan.plan_rms_norm(bf16, 64, weight_dtype="float16")
    with pytest.raises(ValueError, match="gemma needs a weight"):
        fused_plan.plan_fused_add_rms_norm(bf16, 64, gemma=True, weight_dtype="none")


def test_layer_norm_without_weight_has_its_own_unit():
    ln = ln_plan.plan_layer_norm(dtypes.FLOAT16, 5120, weight=False)
    assert ln.expression == "pyrms::layer_norm_kernel<__half, 4, 1, true, false, false, void>"
    assert ln.latency_expression in ln.group and len(ln.group) == 2 * len(ln_plan.plan_layer_norm("fp16", 5120, bias=False)._group((True,)))
    assert not set(ln.group) & set(ln_plan.plan_layer_norm("fp16", 5120).group)
    # its backward (without weight: summing grad_bias or nothing) shares only kernel 2 with the weighted one
    plain, weightless = (bwd_plan.plan_norm_backward("fp16", 5120, centered=True, weight=w) for w in (True, False))
    assert plain.source == weightless.source == "layer_norm_backward.cu"
    assert set(weightless.group) & set(plain.group) == {"pyrms::sum_partials_kernel<__half>", "pyrms::sum_partials_kernel<float>"}
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (3, 77)).astype(np.float32)
    assert np.array_equal(ln_twin.layer_norm_twin(x, None, None, 1e-6, block=32),
                          ln_twin.layer_norm_twin(x, np.ones(77, np.float32), None, 1e-6, block=32))
    assert np.allclose(ln_twin.layer_norm_ref(x, None, None, 1e-6), ln_twin.layer_norm_ref(x, np.ones(77), np.zeros(77), 1e-6))


def test_twin_without_weight_is_the_product_by_one():
    rng = np.random.default_rng(3)
    for dt in dtypes.ALL:
        x = rng.uniform(-3, 3, (4, 77)).astype(dt.numpy)
        ones = np.ones(77, dtype=dt.numpy)
        for round_once in (False, True):
            a = rms_twin.rms_norm_twin(x, None, 1e-6, block=32, round_once=round_once)
            b = rms_twin.rms_norm_twin(x, ones, 1e-6, block=32, round_once=round_once)
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
        # an fp32 weight is used at its fp32 value: equal to the dtype's weight where that is exact
        w = rng.uniform(-1, 1, 77).astype(dt.numpy)
        assert np.array_equal(rms_twin.rms_norm_twin(x, w.astype(np.float32), 1e-6, block=32).view(np.uint8),
                              rms_twin.rms_norm_twin(x, w, 1e-6, block=32).view(np.uint8))
    assert np.allclose(rms_twin.rms_norm_ref(x, None, 1e-6), rms_twin.rms_norm_ref(x, np.ones(77), 1e-6))


def test_backward_plan_names_and_errors():
    p = bwd_plan.plan_norm_backward("float16", 5120, gemma=True)
    # The H200's best at 16384x5120: 128 threads re-reading 5 vectors each (bwd_plan.backward_block), the
    # statistics in the forward's tree of 160 fold threads.
    assert (p.block, p.vectors, p.stats_fold) == (128, 0, 160)
    assert p.expression == "pyrms::rms_norm_backward_kernel<__half, 0, true>" and p.source == "rms_norm_backward.cu"
    assert p.sum_expression == "pyrms::sum_partials_kernel<__half>"
    assert bwd_plan.plan_norm_backward("float16", 5120, centered=True).expression == \
        "pyrms::layer_norm_backward_kernel<__half, 0>"
    with pytest.raises(ValueError, match="grad_dtype must be bfloat16 or float32, got float16"):
        bwd_plan.plan_norm_backward("bfloat16", 64, grad_dtype="float16")
    with pytest.raises(ValueError, match="gemma applies to RMSNorm only"):
        bwd_plan.plan_norm_backward("bfloat16", 64, centered=True, gemma=True)


# --- validation: raised before any driver call, so these run anywhere ---------------------------------

def fused(**kw):
    args = dict(input=A, residual=B, weight=C, epsilon=1e-5, num_tokens=4, hidden_size=64, dtype="float32")
    args.update(kw)
    pyrms.fused_add_rms_norm(**args)


def ln(**kw):
    args = dict(out=A, input=B, weight=C, bias=D, epsilon=1e-5, num_tokens=4, hidden_size=64, dtype="float32")
    args.update(kw)
    pyrms.layer_norm(**args)


@pytest.mark.parametrize("call, kwargs, error, message", [
    (fused, dict(num_tokens=0), ValueError, "num_tokens must be between 1 and 2147483647, got 0"),
    (fused, dict(input=A + 2), ValueError, f"input pointer {A + 2:#x} is not aligned to 4 bytes"),
    (fused, dict(residual_stride=63), ValueError, "residual_stride must be >= hidden_size \\(64\\)"),
    (fused, dict(residual=A + 64), ValueError, "input and residual overlap"),
    (fused, dict(weight=B + 4), ValueError, "residual and weight overlap"),
    (fused, dict(weight="w"), TypeError, "weight must be a device pointer"),
    (fused, dict(weight=None, gemma=True), ValueError, "gemma needs a weight"),
    (fused, dict(weight=C + 2, weight_dtype="float32", dtype="bfloat16"), ValueError,
     f"weight pointer {C + 2:#x} is not aligned to 4 bytes"),
    (ln, dict(epsilon=-1), ValueError, "epsilon must be finite and >= 0, got -1.0"),
    (ln, dict(bias="x"), TypeError, "bias must be a device pointer"),
    (ln, dict(bias=A + 8), ValueError, "out and bias overlap; they must be disjoint$"),
    (ln, dict(out=B + 4), ValueError, "out and input overlap; they must be disjoint or exactly the same memory"),
    (ln, dict(out=Tensor(A, (3, 64), "float32")), ValueError, "out has shape \\(3, 64\\), expected \\(4, 64\\)"),
    (ln, dict(weight=Tensor(C, (64,), "float16")), ValueError, "weight has dtype float16, but the dtype is float32"),
    (backward, dict(rows_per_block=20), ValueError, "rows_per_block must be 1 or a multiple of 16, got 20"),
    (backward, dict(grad_weight_dtype="float16"), ValueError,
     "grad_weight dtype must be bfloat16 \\(the dtype\\) or float32"),
    (backward, dict(grad_weight=Tensor(B, (64,), "float16")), ValueError, "grad_weight dtype must be bfloat16"),
    (backward, dict(grad_weight=B + 2, grad_weight_dtype="float32"), ValueError,
     "grad_weight pointer .* not aligned to 4"),
    (backward, dict(workspace=F + 8), ValueError, f"workspace pointer {F + 8:#x} must be non-null and 16-byte aligned"),
    (backward, dict(workspace=A + 16), ValueError, "grad_input and workspace overlap"),
    (backward, dict(workspace=1.5), TypeError, "workspace must be a device pointer"),
    (backward, dict(grad_weight=E + 2), ValueError, "grad_weight and weight overlap"),
    (backward, dict(grad_input=E), ValueError, "grad_input and weight overlap"),
    (backward, dict(grad_input_stride=65, grad_input=Tensor(A, (4, 64), "bfloat16")), ValueError,
     "grad_input_stride=65 disagrees with grad_input's row stride 64"),
    (backward, dict(layer_norm=True, grad_bias=B + 64), ValueError, "grad_weight and grad_bias overlap"),
    (backward, dict(layer_norm=True, grad_bias=1.5), TypeError, "grad_bias must be a device pointer"),
    (ln, dict(bias=None, weight=A + 64), ValueError, "out and weight overlap"),  # no bias: weight still checked
])
def test_validation_names_the_argument(call, kwargs, error, message):
    with pytest.raises(error, match=message):
        call(**kwargs)


def test_backward_in_place_is_allowed_by_validation():
    from pyrms import driver

    if driver.unavailable_reason() is None:
        pytest.skip("a driver exists here: valid arguments would launch on fake pointers")
    for kwargs in (dict(grad_input=C), dict(grad_input=D), dict(grad_input=C, layer_norm=True),
                   dict(layer_norm=True, grad_bias=None)):  # a LayerNorm without bias has no grad_bias
        with pytest.raises(pyrms.NoDriverError):  # validation passed; the launch needs the device
            backward(**kwargs)
    with pytest.raises(pyrms.NoDriverError):
        ln(bias=None)


def test_workspace_from_arrays_is_sized():
    from pyrms.ops import _operands

    class Array:  # a contiguous uint8 array, as torch.empty(n, dtype=torch.uint8) exports it
        def __init__(self, n, strides=None):
            self.__cuda_array_interface__ = {"data": (F, False), "shape": (n,), "typestr": "|u1", "strides": strides,
                                             "version": 3}

    assert _operands.workspace(Array(4096), 4096).span == (F, F + 4096)
    with pytest.raises(ValueError, match="workspace has 4095 bytes; this launch needs 4096"):
        _operands.workspace(Array(4095), 4096)
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        _operands.workspace(Array(8192, strides=(2,)), 4096)


# --- the stream-ordered workspace -----------------------------------------------------------------------

class FakePool:
    """driver.MemoryPool's interface, recording the calls in order."""

    made = []

    def __init__(self, device, keep_bytes=0):
        self.device, self.keep_bytes, self.calls, self.live = device, keep_bytes, [], set()
        self.made.append(self)

    def allocate(self, nbytes, stream=None):
        ptr = 0x1000 * (len(self.calls) + 1)
        self.calls.append(("allocate", nbytes, stream))
        self.live.add(ptr)
        return ptr

    def free(self, ptr, stream=None):
        self.calls.append(("free", ptr, stream))
        self.live.remove(ptr)

    def trim(self, keep_bytes=0):
        self.calls.append(("trim", keep_bytes))

    @property
    def reserved_bytes(self):
        return 4096 * len(self.live)


def test_a_device_without_memory_pools_says_to_pass_a_workspace(monkeypatch):
    from cuda.bindings import driver as cu

    def refuse(device, keep_bytes=0):
        raise pyrms.CudaError("cuMemPoolCreate", cu.CUresult.CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
                              "operation not supported")

    monkeypatch.setattr(_workspace.driver, "MemoryPool", refuse)
    dev = type("Dev", (), {"ordinal": 3, "workspace": None})()
    with pytest.raises(pyrms.CudaError, match=r"cuMemPoolCreate failed: CUDA_ERROR_NOT_SUPPORTED: operation not "
                                              r"supported \(the backward's workspace pool on device 3; pass workspace="):
        with _workspace.borrowed(dev, 0, 64):
            pass
    assert dev.workspace is None  # nothing half-made is kept


def test_workspace_is_allocated_and_freed_on_the_calls_stream(monkeypatch):
    from pyrms.driver import _process

    monkeypatch.setattr(_workspace.driver, "MemoryPool", FakePool)
    FakePool.made.clear()
    synced = []

    def device(ordinal):
        return type("Dev", (), {"ordinal": ordinal, "workspace": None,
                                "synchronize": lambda self: synced.append(ordinal)})()

    dev0, dev1 = device(0), device(1)
    state = _process._Process()  # the process's state, knowing just these two devices
    state.devices.update({0: dev0, 1: dev1})
    monkeypatch.setattr(_process, "_state", state)
    with _workspace.borrowed(dev0, 7, 100) as a:
        assert FakePool.made[0].calls == [("allocate", 100, 7)] and _workspace.cached_bytes() == 4096
    assert FakePool.made[0].calls[-1] == ("free", a, 7)  # freed on the same stream, after the block
    with pytest.raises(RuntimeError, match="launch failed"):
        with _workspace.borrowed(dev0, 8, 5000) as b:
            raise RuntimeError("launch failed")
    assert FakePool.made[0].calls[-1] == ("free", b, 8)  # also when the block raises
    with _workspace.borrowed(dev1, 7, 100):
        pass
    assert len(FakePool.made) == 2 and FakePool.made[0].device is dev0 and FakePool.made[1].device is dev1
    assert FakePool.made[0].keep_bytes == _workspace.KEEP_BYTES
    assert _workspace.cached_bytes() == 0  # nothing outlives its call
    _workspace.release_workspaces()
    assert synced == [0, 1] and all(pool.calls[-1] == ("trim", 0) for pool in FakePool.made)


# --- what NVRTC makes of every variant ------------------------------------------------------------------

def _all_variants(source):
    exprs = []
    for dt in dtypes.ALL:
        if source == "fused_add_rms_norm.cu":  # rms_norm.cu's row (rms_norm_row.cuh), every weight kind
            exprs += [e for g in (False, True) for r in (False, True)
                      for e in fused_plan.plan_fused_add_rms_norm(dt, 64, gemma=g, round_once=r).group]
            exprs += [e for w in (("none", "float32") if dt is not dtypes.FLOAT32 else ("none",))
                      for e in fused_plan.plan_fused_add_rms_norm(dt, 64, weight_dtype=w).group]
            if dt is not dtypes.FLOAT32:  # the fp32-sum kernel, with each residual dtype (its own units)
                exprs += [e for r in (None, "float32") for options in ({}, dict(gemma=True, weight_dtype="float32"))
                          for e in fused_plan.plan_fused_add_rms_norm(dt, 64, sum_precision="fp32", residual_dtype=r,
                                                                **options).group]
        elif source == "layer_norm.cu":
            exprs += ln_plan.plan_layer_norm(dt, 64).group + ln_plan.plan_layer_norm(dt, 64, weight=False).group
        else:
            centered = source == "layer_norm_backward.cu"
            exprs += [e for w in (True, False) for e in bwd_plan.plan_norm_backward(dt, 64, centered=centered,
                                                                                     weight=w).group]
    return list(dict.fromkeys(exprs))


@pytest.fixture(scope="module", params=["fused_add_rms_norm.cu", "layer_norm.cu", "rms_norm_backward.cu",
                                        "layer_norm_backward.cu"])
def program(request, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYRMS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        prog = compile_with_report(request.param, _all_variants(request.param))
    return prog


@pytest.mark.slow  # NVRTC and ptxas over 550 kernels (1.5 min on 2 cores)
def test_every_variant_compiles_without_spills_and_aligned_paths_are_16_bytes_wide(program):
    functions = assert_no_spills(program, _all_variants(program.source_name))
    for expression, lowered in program.lowered_names.items():
        assert functions[lowered].waits_before_memory(), expression  # pdl=True is safe
        if "sum_partials" in expression:
            continue
        widths_in, widths_out = functions[lowered].widths(True), functions[lowered].widths(False)
        if "_staged_" in expression:  # norm_backward_staged's rows arrive by the bulk copy engine on sm_90
            fn = functions[lowered]
            body = "\n".join(program.ptx.splitlines()[fn.first_line - 1:fn.last_line])
            assert re.search(r"cp\.async\.bulk\.shared::cluster\.global\.mbarrier::complete_tx::bytes", body), expression
            assert "cp.async.cg" not in body, expression
            assert widths_out.get(16, 0) > 0, expression
            continue
        assert widths_in.get(16, 0) > 0 and widths_out.get(16, 0) > 0, expression
    assert re.search(r"ld\.global(\.nc)?\.v4\.", program.ptx) and re.search(r"st\.global\.v4\.", program.ptx)


def test_ptx_dump_knows_the_family():
    import importlib

    tool = importlib.import_module("tools.ptx_dump")
    bf16 = dtypes.BFLOAT16

    def expression(kernel, variant=None, hidden=5120):
        family = tool.FAMILIES[kernel]
        return family.expression(bf16, hidden, tool.resolve_variant(family, variant, bf16, hidden))

    assert expression("fused_add_rms_norm", "gemma") == fused_plan.plan_fused_add_rms_norm(bf16, 5120, gemma=True).expression
    assert expression("fused_add_rms_norm", "fp32_sum,few") == \
        fused_plan.plan_fused_add_rms_norm(bf16, 5120, sum_precision="fp32").latency_expression
    assert expression("fused_add_rms_norm", "fp32_residual,weight=float32") == \
        fused_plan.plan_fused_add_rms_norm(bf16, 5120, residual_dtype="float32", weight_dtype="float32").expression
    assert expression("layer_norm", "cache=0") == "pyrms::layer_norm_kernel<__nv_bfloat16, 0, 1, true, false, false>"
    assert expression("layer_norm", "bias=false") == "pyrms::layer_norm_kernel<__nv_bfloat16, 4, 1, false, false, false>"
    assert expression("layer_norm", "few") == "pyrms::layer_norm_kernel<__nv_bfloat16, 4, 4, true, true, false>"
    assert expression("rms_norm", "few,gemma") == rms_plan.plan_rms_norm(bf16, 5120, gemma=True).latency_expression
    assert expression("rms_norm", "few", hidden=16384) == "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 2, false, false, true, false>"
    assert expression("fused_add_rms_norm", "few,cache=2") == \
        "pyrms::fused_add_rms_norm_kernel<__nv_bfloat16, 2, 2, false, false, true, false>"
    assert expression("rms_norm_backward", "gemma") == "pyrms::rms_norm_backward_kernel<__nv_bfloat16, 0, true>"
    assert expression("layer_norm_backward", hidden=65537) == "pyrms::layer_norm_backward_kernel<__nv_bfloat16, 0>"
    assert expression("sum_partials", "grad=fp32") == "pyrms::sum_partials_kernel<float>"
    # the fused norms without variants of their own there: the planned kernel
    from pyrms.ops.gated_rms_norm.plan import plan_gated_rms_norm
    from pyrms.ops.qk_norm_rope.plan import plan_qk_norm_rope
    assert expression("gated_rms_norm", hidden=4096) == plan_gated_rms_norm(bf16, 4096).expression == \
        "pyrms::gated_rms_norm_kernel<__nv_bfloat16, 4, 1, true, false, false>"
    assert expression("qk_norm_rope", hidden=128) == plan_qk_norm_rope(bf16, 128).expression
    assert expression("rms_norm", "weight=float32") == \
        "pyrms::rms_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, false, float>"
    assert expression("fused_add_rms_norm", "few,weight=none") == \
        "pyrms::fused_add_rms_norm_kernel<__nv_bfloat16, 4, 4, false, false, true, false, void>"
    assert expression("layer_norm", "weightless,bias=false") == \
        "pyrms::layer_norm_kernel<__nv_bfloat16, 4, 1, false, false, false, void>"
    with pytest.raises(ValueError, match="expected weight=same\\|float32\\|none, got 'fp8'"):
        tool.resolve_variant(tool.FAMILIES["rms_norm"], "weight=fp8", bf16, 64)
    variant = tool.resolve_variant(tool.FAMILIES["rms_norm"], "weight=none", bf16, 64)
    assert tool.output_stem("rms_norm", bf16, 64, "sm_90", variant).endswith("-weightnone")
    assert "weight" not in tool.output_stem("rms_norm", bf16, 64, "sm_90", tool.FAMILIES["rms_norm"].defaults(bf16, 64))
    assert expression("rms_norm_backward", "weightless") == \
        "pyrms::rms_norm_backward_kernel<__nv_bfloat16, 0, false, void>"
    assert expression("layer_norm_backward", "weightless,grad_bias=false") == \
        "pyrms::layer_norm_backward_kernel<__nv_bfloat16, 0, void, false>"
    with pytest.raises(ValueError, match="grad_bias=false is a variant of the kernel without weight"):
        expression("layer_norm_backward", "grad_bias=false")
    backwards = [spec for spec in registry.REGISTRY.values() if spec.inspect and spec.inspect.kind == "backward"]
    assert len(backwards) >= 2
    for spec in backwards:  # each backward's vectors= offers its plan's choices (Inspect.vectors), none beyond
        assert spec.inspect.vectors == bwd_plan.BACKWARD_VECTORS
        with pytest.raises(ValueError, match="vectors=0\\|1\\|2"):
            tool.resolve_variant(tool.FAMILIES[spec.name], "vectors=3", bf16, 64)
        assert tool.resolve_variant(tool.FAMILIES[spec.name], "vectors=2", bf16, 64)["vectors"] == 2
