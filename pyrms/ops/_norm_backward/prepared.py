"""The prepared launch of the norm backward, RMSNorm's or LayerNorm's (centered: the mean subtracted), and its
call path from raw pointers or arrays (kernels: cuda_src/norm_backward.cuh, instantiated per op)."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

from ... import driver, dtypes, launch
from .. import _operands as check
from .. import _explain, _placement, _workspace
from .._prepared import Pointers, PreparedCache, scalars_ok, use_pdl
from . import plan as bwd_plan

CALL_SHAPES = 256  # row counts whose launch shape a prepared backward keeps (Prepared._call_shape)


def rows_per_block_arg(value, plan: bwd_plan.NormBackwardPlan) -> int | None:
    """``rows_per_block=``: None (planned per call), 1, or a positive multiple of the plan's chunk (by the row
    count: the largest a row count takes, so that a block covers whole chunks whatever the rows)."""
    if value is None:
        return None
    value = check.size("rows_per_block", value)
    chunk_rows = plan.chunk_rows or bwd_plan.GRAD_CHUNK_ROWS
    if value != 1 and value % chunk_rows:
        raise ValueError(f"rows_per_block must be 1 or a multiple of {chunk_rows}, got {value}")
    return value


class Prepared:
    """One (device, op, dtypes, hidden, strides, options) of a backward pass, resolved once: the plan,
    both kernels (kernel 1 alone where nothing is summed over rows), the shared-memory opt-in and the
    pointer checks. weightless: no weight (its pointer is 0, never read), no grad_weight; grad_bias:
    the bias's gradient is asked for (LayerNorm's, or RMSNorm's with a bias); weight_dtype, grad_output_dtype:
    None for the rows' dtype."""

    __slots__ = ("device", "plan", "rows_kernel", "rows_shared", "staged_kernel", "staged_shapes", "sms", "sm_shared",
                 "staged_limit", "sum_kernel", "hidden", "strides",
                 "rows_per_block", "max_rows", "pointers", "saved_pointers", "weight_item", "staged_masks",
                 "weightless", "pdl", "placed", "call_shapes", "few_kernel", "few_rows")

    def __init__(self, device, centered, dtype, grad_weight_dtype, hidden, grad_input_stride, grad_output_stride,
                 input_stride, gemma, rows_per_block, weightless, grad_bias, pdl, weight_dtype=None,
                 grad_output_dtype=None):
        self.device = device
        self.pdl = use_pdl(device, pdl)
        hidden = check.size("hidden_size", hidden)
        dt = dtypes.BFLOAT16 if dtype is None else dtypes.get(dtype)
        self.strides = tuple(check.stride_arg(name, value, hidden) for name, value in (
            ("grad_input_stride", grad_input_stride), ("grad_output_stride", grad_output_stride),
            ("input_stride", input_stride)))
        grad_bias = bool(grad_bias)
        self.weightless = weightless = bool(weightless)
        p = self.plan = bwd_plan.plan_norm_backward(dt, hidden, centered=centered, gemma=bool(gemma),
                                                   grad_dtype=grad_weight_dtype, weight=not weightless,
                                                   grad_bias=grad_bias, weight_dtype=weight_dtype,
                                                   grad_output_dtype=grad_output_dtype)
        pdt, go_item = p.grad_dtype, p.grad_output_itemsize
        self.rows_per_block = rows_per_block_arg(rows_per_block, p)  # None: planned per call
        self.rows_kernel = launch.get_kernel(p.source, p.expression, p.group, p.signature, device)
        params = int(not weightless) + int(grad_bias)  # the parameter gradients written, in plane order
        self.sum_kernel = launch.get_kernel(p.source, p.sum_expression, p.group, p.sum_contract.signature, device) if params else None
        # Few rows given their saved statistics: one launch, where planned and no rows_per_block is forced (a forced
        # one asks for kernel 1's shape).
        self.few_rows = 0 if rows_per_block is not None or not params else p.one_launch_rows()
        self.few_kernel = launch.get_kernel(p.source, p.few_expression, p.group, p.few_contract.signature,
                                            device) if self.few_rows else None
        # What this GPU lets a block opt into (227 KiB on Hopper, less on earlier GPUs), less 1 KiB for the
        # kernels' static shared memory: the planned shared memory of either kernel is taken only where it fits.
        limit = device.max_shared_memory_per_block_optin - 1024
        # kernel 1's sums in shared memory where they fit, else in the workspace (the same order)
        self.rows_shared = p.shared_bytes if p.shared_bytes <= limit else 0
        if self.rows_shared:  # opt in whenever dynamic shared memory is used: the kernel's static shared memory
            # counts against the 48 KiB default too, so 48 KiB of sums alone may already not fit (found by
            # the randomized check: fp32, hidden 12280, 49,120 bytes of sums failed with INVALID_VALUE)
            self.rows_kernel.set_max_dynamic_shared(min(bwd_plan.SHARED_SUMS_LIMIT, limit))
        self.hidden, self.weight_item = hidden, p.weight_itemsize or dt.itemsize
        # The staged kernel, where planned and every row shares the first's alignment (strides of whole
        # 16-byte vectors): taken per call when grad_input, grad_output and input are 16-byte aligned and
        # the weight starts a vector of the column split (16 bytes of a weight of the dtype, 32 of an fp32
        # one: norm_backward_staged splits at phase 0).
        self.staged_kernel = None
        self.staged_masks = (15, 15, 15, self.weight_item * dt.vec_elems - 1)
        # The staged kernel's (stages, dynamic shared memory) by rows per block and blocks per multiprocessor
        # (plan.staged_launch), resolved at the first call of each.
        self.staged_shapes: dict[tuple[int, int], tuple[int, int]] = {}
        # A call's launch shape by (row count, staged), resolved at its first call (_call_shape): the plan's
        # arithmetic for it is a few dozen Python calls, which a training step would pay per norm.
        self.call_shapes: dict[tuple[int, bool], tuple[int, int, int, int, int, int]] = {}
        self.sms, self.sm_shared = device.multiprocessor_count, device.max_shared_memory_per_multiprocessor
        self.staged_limit = min(bwd_plan.STAGED_SHARED_LIMIT, limit)
        if (p.stages and p.staged_shared_bytes(p.stages) <= self.staged_limit
                and all(s * item % 16 == 0 for s, item in zip(self.strides, (dt.itemsize, go_item, dt.itemsize)))):
            self.staged_kernel = launch.get_kernel(p.source, p.staged_expression, p.group, p.staged_contract.signature,
                                                   device)
            self.staged_kernel.set_max_dynamic_shared(self.staged_limit)
        self.max_rows = check.max_rows(hidden, *self.strides)
        gi, go, x = self.strides
        # grad_input, grad_output, input, the weight (if any), then the parameter gradients: what is
        # written (grad_input and the parameter gradients) is disjoint from everything else, but
        # grad_input may be exactly grad_output or input.
        vectors = [(self.weight_item, 0)] * (not weightless) + [(pdt.itemsize, 0)] * params
        operands = [(dt.itemsize, gi), (go_item, go), (dt.itemsize, x), *vectors]
        first_param = len(operands) - params
        written = [0, *range(first_param, len(operands))]
        pairs = [(i, j, (i, j) in ((0, 1), (0, 2))) for i in written for j in range(len(operands))
                 if j != i and not (j in written and j < i)]
        self.pointers = Pointers(hidden, operands, pairs)
        # The forward's saved statistics, last (LayerNorm's mean, then rstd; RMSNorm's rstd): one float32 per row
        # each, read, disjoint from what is written.
        stats = range(len(operands), len(operands) + (2 if p.centered else 1))
        self.saved_pointers = Pointers(hidden, [*operands, *[(4, 1, 1)] * len(stats)],
                                       [*pairs, *((i, j, False) for i in written for j in stats)])
        self.placed = _placement.for_device(device)

    def _staged(self, grad_input, grad_output, input, weight) -> bool:
        """Whether a call takes the staged kernel: where planned and the pointers allow it."""
        m_gi, m_go, m_x, m_w = self.staged_masks
        return self.staged_kernel is not None and not (grad_input & m_gi or grad_output & m_go or input & m_x
                                                       or weight & m_w)

    def _one_launch(self, grad_input, grad_output, input, num_tokens) -> bool:
        """Whether a call given the saved statistics takes the one launch of few rows: where planned, and not in
        place (its column blocks read x and dy while its row blocks write dx)."""
        return num_tokens <= self.few_rows and grad_input != grad_output and grad_input != input

    def _call_shape(self, num_tokens: int, staged: bool) -> tuple[int, int, int, int, int, int]:
        """(rows per block, the kernel's chunk argument, sum_partials' group, workspace rows, workspace bytes,
        chunks) of a call, from the plan."""
        shape = self.call_shapes.get((num_tokens, staged))
        if shape is None:
            p = self.plan
            rows_per_block = self.rows_per_block or p.rows_per_block(num_tokens, staged)
            # One row per block: kernel 1 writes each row's terms, kernel 2 makes the chunks of them.
            chunk = p.chunk_for(num_tokens)
            ws_chunk, group = (1, chunk) if rows_per_block == 1 else (chunk, 1)
            if len(self.call_shapes) >= CALL_SHAPES:  # a server's row counts vary without end
                self.call_shapes.clear()
            shape = self.call_shapes[(num_tokens, staged)] = (
                rows_per_block, ws_chunk, group, p.workspace_rows(num_tokens, rows_per_block),
                p.workspace_bytes(num_tokens, rows_per_block), p.chunks(num_tokens))
        return shape

    def workspace_bytes(self, grad_input, grad_output, input, weight, num_tokens, saved: bool = False) -> int:
        """Bytes of workspace a call with these pointers needs (0: none), for a caller that passes its own
        (pyrms.torch takes it from torch's caching allocator, on the stream the launch runs on); saved: the call
        is given the forward's statistics (few rows then need none)."""
        if saved and self._one_launch(grad_input, grad_output, input, num_tokens):
            return 0
        return self._call_shape(num_tokens, self._staged(grad_input, grad_output, input, weight))[4]

    def __call__(self, grad_input, grad_output, input, weight, grads, epsilon, num_tokens, stream, workspace,
                 rstd=0, mean=0) -> bool:
        """Launch, or return False having launched nothing. weight: 0 when weightless; grads: the parameter
        gradients' pointers in plane order (grad_weight unless weightless, then grad_bias if asked for); rstd,
        mean: the forward's saved statistics (float32, one per row; LayerNorm's both, RMSNorm's rstd alone), or
        0 to recompute them."""
        pointers = (grad_input, grad_output, input, *grads) if self.weightless else (
            grad_input, grad_output, input, weight, *grads)
        checked, centered = self.pointers, self.plan.centered
        saved = (mean, rstd) if centered else (rstd,)  # the kernels' statistics pointers (null: recompute)
        if rstd or mean:
            if not (rstd and (mean if centered else not mean)):  # LayerNorm's two go together; RMSNorm has no mean
                return False
            checked, pointers = self.saved_pointers, (*pointers, *saved)
        if not (scalars_ok(epsilon, num_tokens, self.max_rows) and checked.ok(pointers, num_tokens)):
            return False
        p, hidden, handle, placed = self.plan, self.hidden, check.stream(stream), self.placed
        if placed is not None and not placed.ok(pointers, handle):
            return False
        gi_stride, go_stride, x_stride = self.strides
        if rstd and self._one_launch(grad_input, grad_output, input, num_tokens):
            # grad_weight and grad_bias by name (0: not written), from the planes' order
            named = (0, *grads) if self.weightless else (*grads, 0)
            self.few_kernel.launch(num_tokens + -(-hidden // 32), p.block,
                                   (grad_input, named[0], named[1], int(p.grad_dtype is dtypes.FLOAT32), grad_output,
                                    input, weight, *saved, epsilon, num_tokens, hidden, gi_stride, go_stride, x_stride,
                                    p.chunk_for(num_tokens), p.stats_fold), handle, pdl=self.pdl)
            return True
        staged = self._staged(grad_input, grad_output, input, weight)
        rows_per_block, ws_chunk, group, ws_rows, needed, chunks = self._call_shape(num_tokens, staged)
        # Where column 0 sits in a workspace row: the weight's phase in the column split (0 without one).
        weight_phase = weight // self.weight_item % p.dtype.vec_elems
        # needed: 0 where nothing is summed, and then no workspace is borrowed
        borrowed = contextlib.nullcontext(workspace or 0) if workspace or not needed else _workspace.borrowed(
            self.device, handle, needed)
        with borrowed as ws:
            if staged:
                blocks = -(-num_tokens // rows_per_block)
                # staged_launch depends on the blocks per multiprocessor only up to 2 (3: more)
                key = (rows_per_block, min(-(-blocks // self.sms), 3))
                shape = self.staged_shapes.get(key)
                if shape is None:
                    shape = self.staged_shapes[key] = p.staged_launch(rows_per_block, blocks, self.sms, self.sm_shared,
                                                                      self.staged_limit)
                stages, shared = shape
                self.staged_kernel.launch(blocks, p.threads,
                                          (grad_input, ws, grad_output, input, weight, *saved, epsilon, num_tokens, hidden,
                                           gi_stride, go_stride, x_stride, ws_chunk, rows_per_block, p.ws_stride,
                                           p.stats_fold, p.block, stages), handle,
                                          shared, pdl=self.pdl)
            else:
                self.rows_kernel.launch(-(-num_tokens // rows_per_block), p.block,
                                        (grad_input, ws, grad_output, input, weight, *saved, epsilon, num_tokens, hidden,
                                         gi_stride, go_stride, x_stride, ws_chunk, rows_per_block, p.ws_stride,
                                         1 if self.rows_shared else 0, p.stats_fold), handle, self.rows_shared,
                                        pdl=self.pdl)
            for k, grad in enumerate(grads):  # dweight, then dbias from the next plane
                plane = ws + k * ws_rows * p.ws_stride * 4
                self.sum_kernel.launch(-(-hidden // 32), (32, 32), (grad, plane, hidden, chunks, p.ws_stride,
                                                                     weight_phase, group, ws_rows), handle, pdl=self.pdl)
        return True


_prepared = PreparedCache(Prepared)
_last = _prepared.last  # pyrms.torch's last eager backward, bound when it repeats


def launch_prepared(prepared: Prepared, args: tuple) -> bool:
    """``prepared(*args)`` for pyrms.torch's eager backward (every operand a raw pointer, its workspace given),
    through the backward's last call (bound when it repeats, _prepared.LastCall: a training loop's steps hand the
    same shapes and, from torch's caching allocator, the same addresses): True where it launched, False where the
    prepared launch declined (the general path then says why). ``args`` are exactly of the types its checks take
    (ints, a tuple of ints, a float epsilon, an int stream handle): the memo compares values. The prepared launch
    belongs to one device and one set of static arguments, so it is the rest of the key."""
    return _last.launch((prepared, args), prepared, args)


def parameter_gradients(weight, grad_weight, grad_bias, grad_weight_dtype) -> dict:
    """The parameter gradients a call writes, by name, in the workspace's plane order: grad_weight
    (required with a weight, refused without one), then grad_bias unless None; ValueError
    for a grad_weight_dtype given where none is written."""
    if weight is None and grad_weight is not None:
        raise ValueError("grad_weight was given, but weight is None: without a weight there is no weight "
                         "gradient; pass grad_weight=None")
    grads = {} if weight is None else {"grad_weight": grad_weight}
    if grad_bias is not None:
        grads["grad_bias"] = grad_bias
    if not grads and grad_weight_dtype is not None:
        raise ValueError(f"grad_weight_dtype={grad_weight_dtype!r} was given, but no parameter gradient is written "
                         "(weight=None and no grad_bias); leave it out")
    return grads


def norm_backward(*, centered, grad_input, grad_weight, grad_bias, grad_output, input, weight, epsilon,
                  num_tokens, hidden_size, dtype, grad_output_stride, input_stride, grad_input_stride, gemma,
                  grad_weight_dtype, workspace, rows_per_block, stream, pdl, weight_dtype=None, grad_output_dtype=None,
                  rstd=None, mean=None):
    """The backward of RMSNorm, or of LayerNorm where centered (the mean subtracted): each op's function, whose
    docstring says what the arguments are. Raw pointers go to the prepared launch; arrays are read first."""
    params = parameter_gradients(weight, grad_weight, grad_bias, grad_weight_dtype)
    grads = tuple(params.values())
    if (type(grad_input) is int and type(grad_output) is int and type(input) is int
            and (weight is None or type(weight) is int) and all(type(g) is int for g in grads) and workspace is None
            and (rstd is None or (type(rstd) is int and rstd > 0))
            and (mean is None or (type(mean) is int and mean > 0))):
        static = (centered, dtype, grad_weight_dtype, hidden_size, grad_input_stride, grad_output_stride,
                  input_stride, gemma, rows_per_block, weight is None, "grad_bias" in params, pdl, weight_dtype,
                  grad_output_dtype)
        prepared = _prepared.get(*static)
        if prepared is not None and prepared(grad_input, grad_output, input, weight or 0, grads, epsilon, num_tokens,
                                             stream, None, rstd or 0, mean or 0):
            return
    rows_or_vectors = (grad_input, grad_output, input, *(() if weight is None else (weight,)))
    if not all(isinstance(v, int) for v in rows_or_vectors):  # arrays: read once, then the raw-pointer path
        dt, num_tokens, hidden_size, found = check.arrays(
            dtype, num_tokens, hidden_size,
            rows=[("grad_output", grad_output, grad_output_stride, "grad_output_stride", False),
                  ("input", input, input_stride, "input_stride", False),
                  ("grad_input", grad_input, grad_input_stride, "grad_input_stride", True)],
            vectors=[] if weight is None else [("weight", weight)], mixed=("weight", "grad_output"))
        if not num_tokens:
            return
        (grad_output, grad_output_stride, go_dtype), (input, input_stride), (grad_input, grad_input_stride) = (
            found[name] for name in ("grad_output", "input", "grad_input"))
        grad_output_dtype = check.dtype_operand("grad_output", go_dtype, grad_output_dtype)
        if weight is not None:
            weight, _, w_dtype = found["weight"]
            weight_dtype = check.dtype_operand("weight", w_dtype, weight_dtype)
        dtype = dt
    saved = {name: value for name, value in (("mean", mean), ("rstd", rstd)) if value is not None}
    for name, value in saved.items():
        if type(value) is not int:
            saved[name] = check.float32_per_row(name, value, check.sizes(num_tokens, hidden_size)[0],
                                                f"a saved {name}'s values", written=False)
    _general(centered, grad_input, params, grad_output, input, weight, epsilon, num_tokens, hidden_size, dtype,
             grad_output_stride, input_stride, grad_input_stride, gemma, grad_weight_dtype, workspace, rows_per_block,
             stream, pdl, weight_dtype, grad_output_dtype, saved)


def _general(centered, grad_input, params, grad_output, input, weight, epsilon, num_tokens, hidden_size, dtype,
             grad_output_stride, input_stride, grad_input_stride, gemma, grad_weight_dtype, workspace, rows_per_block,
             stream, pdl, weight_dtype, grad_output_dtype, saved):
    """Every check with its message, the shared explain path's on the backward's declaration (the rows, the weight
    and the saved statistics, ``saved`` by name, are raw pointers by now; the parameter gradients, by name, may
    still be arrays, which its facts hook reads), then the prepared launch on the pointers."""
    call = dict(centered=centered, grad_input=grad_input, params=params, grad_output=grad_output, input=input,
                weight=weight, mean=saved.get("mean"), rstd=saved.get("rstd"), epsilon=epsilon, num_tokens=num_tokens,
                hidden_size=hidden_size, dtype=dtype, grad_output_stride=grad_output_stride, input_stride=input_stride,
                grad_input_stride=grad_input_stride, gemma=gemma, grad_weight_dtype=grad_weight_dtype,
                workspace=workspace, rows_per_block=rows_per_block, stream=stream, pdl=pdl, weight_dtype=weight_dtype,
                grad_output_dtype=grad_output_dtype)
    facts = _explain.explain(_DECLARATION, call)
    p, hidden = facts.plan, facts.plan.hidden
    strides = tuple(check.stride_arg(name, call[name], hidden)
                    for name in ("grad_input_stride", "grad_output_stride", "input_stride"))
    prepared = _prepared.require(centered, p.dtype, facts.grads, hidden, *strides, gemma, rows_per_block, weight is None,
                                 "grad_bias" in params, pdl, _float32(p.fp32_weight), _float32(p.fp32_grad_output))
    launched = prepared(grad_input, grad_output, input, weight or 0, tuple(facts.pointers.values()), float(epsilon),
                        int(num_tokens), stream, facts.workspace, saved.get("rstd", 0), saved.get("mean", 0))
    assert launched, "the checks above accept what the prepared launch declines"


def _facts(call: dict, num_tokens: int, hidden: int) -> SimpleNamespace:
    """The backward's own checks for the shared explain path: the saved statistics it takes, no weight_dtype
    without a weight, its plan's (what may be float32 beside the rows), the parameter gradients (read where they
    are arrays, of one dtype: the rows' or float32), rows_per_block and a caller's workspace; and per call the
    operands' dtypes and pointers, the plan and the workspace's pointer and span (None: none given)."""
    centered, params, saved = call["centered"], call["params"], [name for name in ("mean", "rstd") if call[name]
                                                                  is not None]
    if not centered and "mean" in saved:
        raise TypeError("RMSNorm's backward takes no mean (its statistic is rstd alone)")
    if centered and len(saved) == 1:
        given, missing = (*saved, *({"mean", "rstd"} - set(saved)))
        raise ValueError(f"{given} was given without {missing}: LayerNorm's backward reads the forward's mean and "
                         f"rstd together (pass both, or neither to recompute them)")
    weightless, grad_weight_dtype = call["weight"] is None, call["grad_weight_dtype"]
    if weightless:
        check.no_weight(call["weight_dtype"])
    dt = dtypes.BFLOAT16 if call["dtype"] is None else dtypes.get(call["dtype"])
    # The plan names what may be float32 beside the rows (the weight, then grad_output) before any pointer is read.
    p0 = bwd_plan.plan_norm_backward(dt, 1, centered=centered, weight=not weightless, grad_bias="grad_bias" in params,
                                    weight_dtype=None if weightless else call["weight_dtype"],
                                    grad_output_dtype=call["grad_output_dtype"])
    if p0.fp32_weight and grad_weight_dtype is not None and dtypes.get(grad_weight_dtype) is not dtypes.FLOAT32:
        raise ValueError(f"grad_weight_dtype must be float32 beside a float32 weight (the parameter gradients take "
                         f"the weight's dtype), got {dtypes.get(grad_weight_dtype).name}")
    # The parameter gradients: [hidden] vectors of their own dtype (float32 beside an fp32 weight), arrays read.
    pdt, grads = check.parameter_vectors(hidden, dt, params, dtypes.FLOAT32 if p0.fp32_weight else grad_weight_dtype,
                                         None if call["dtype"] is None else dt)
    arrays = [op for op in grads.values() if op.array is not None]
    if arrays:  # on the launch's device (asking the driver only where some gradient is an array)
        check.same_device(arrays, driver.selected_device().ordinal)
    p = bwd_plan.plan_norm_backward(dt, hidden, centered=centered, gemma=bool(call["gemma"]), grad_dtype=pdt,
                                   weight=not weightless, grad_bias="grad_bias" in params,
                                   weight_dtype=_float32(p0.fp32_weight), grad_output_dtype=_float32(p0.fp32_grad_output))
    per_call = rows_per_block_arg(call["rows_per_block"], p)
    own = None if call["workspace"] is None else check.workspace(call["workspace"], p.workspace_bytes(num_tokens,
                                                                                                     per_call))
    pointers = {name: op.ptr for name, op in grads.items()}
    return SimpleNamespace(dtype=dt, grad_output=dtypes.FLOAT32 if p0.fp32_grad_output else dt,
                           weight=dtypes.FLOAT32 if p0.fp32_weight else dt, grads=pdt, pointers=pointers,
                           grad_weight=pointers.get("grad_weight"), grad_bias=pointers.get("grad_bias"), plan=p,
                           workspace=own and own.ptr, workspace_span=own and (0, own.span[1] - own.span[0]))


# What is written (grad_input and the parameter gradients) is disjoint from everything else, but grad_input may be
# exactly grad_output or input; a caller's workspace (its bytes) and the forward's saved statistics are read.
_DECLARATION = _explain.Declaration(
    operands=(_explain.Memory("grad_input", stride="grad_input_stride", written=True),
              _explain.Memory("grad_weight", _explain.Fact("grads"), written=True, optional=True,
                              key=_explain.Fact("grad_weight")),
              _explain.Memory("grad_bias", _explain.Fact("grads"), written=True, optional=True,
                              key=_explain.Fact("grad_bias")),
              _explain.Memory("grad_output", _explain.Fact("grad_output"), stride="grad_output_stride"),
              _explain.Memory("input", stride="input_stride"),
              _explain.Memory("weight", _explain.Fact("weight"), optional=True),
              _explain.Memory("workspace", dtypes.INT8, span=_explain.Fact("workspace_span"), optional=True,
                              key=_explain.Fact("workspace")),
              _explain.statistic("mean", written=False), _explain.statistic("rstd", written=False)),
    facts=_facts, in_place=(("grad_input", "grad_output"), ("grad_input", "input")),
    strides=("grad_input_stride", "input_stride", "grad_output_stride"))


def _float32(flag: bool) -> str | None:
    """A plan's fp32 flag as the dtype argument that asks for it (None: the rows' dtype)."""
    return "float32" if flag else None
