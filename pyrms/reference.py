"""Numpy references for the kernels (no GPU, no CUDA import).

- ``rms_norm_ref``: float64, the mathematical definition; for tolerances.
- ``rms_norm_twin``: reproduces ``cuda_src/rms_norm.cu`` bit for bit: the same per-thread
  accumulation order (by the input row's alignment), the same butterfly reduction, the same
  correctly rounded fp32 operations (numpy's float32 ufuncs round to nearest and never fuse),
  and the same conversions (ml_dtypes and numpy round to nearest even, like __float2*_rn).
- ``seed_rms_norm_cpu``: the seed program's own CPU loop (``rms_norm_cpu`` in the C++ source).
- The rest of the family, each as a float64 reference and a bit-exact twin of its kernel:
  ``fused_add_rms_norm_ref``/``_twin`` (fused_add_rms_norm.cu), ``layer_norm_ref``/``_twin``
  (layer_norm.cu), ``rms_norm_backward_ref``, ``layer_norm_backward_ref`` and ``norm_backward_twin``
  (norm_backward.cuh, both backward kernels and the fixed-order sum over rows).
- ``quantize_static``, ``quantize_per_token``, ``quantize_per_group``: the fp8/int8 output step on fp32
  normalized rows (docs/numerics.md, "Quantized outputs"), and the twins of the kernels that apply it
  (rms_norm_quant.cu): ``normalized_twin``, ``rms_norm_quant_twin``, ``fused_add_rms_norm_quant_twin``.
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .plan import QUANT_GROUPS, row_split

F32 = np.float32


def _as_2d(x):
    x = np.asarray(x)
    return x.reshape(1, -1) if x.ndim == 1 else x


def rms_norm_ref(x, weight, epsilon, *, gemma=False):
    """float64 RMSNorm of the rows of x: x / sqrt(mean(x^2) + eps) * w (w = 1 + weight for Gemma; 1
    for weight None)."""
    x64 = _as_2d(x).astype(np.float64)
    w64 = np.float64(1.0) if weight is None else np.asarray(weight).astype(np.float64)
    if gemma:
        w64 = 1.0 + w64
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + float(epsilon))
    return x64 * inv * w64


def _butterfly(v):
    """The xor-butterfly over the last axis (32 lanes) of pyrms::block_sum, one warp per row of v."""
    lanes = np.arange(32)
    for offset in (16, 8, 4, 2, 1):
        v = v + v[..., lanes ^ offset]
    return v


def block_sum_twin(partials):
    """pyrms::block_sum over the last axis (length = blockDim.x, a multiple of 32)."""
    rows, block = partials.shape
    warps = _butterfly(partials.reshape(rows, block // 32, 32))[..., 0]
    padded = np.zeros((rows, 32), dtype=F32)
    padded[:, : block // 32] = warps
    return _butterfly(padded)[:, 0]


def sum_squares_twin(xf, block, phase, vec_elems):
    """Per-row fp32 sums of squares in the kernel's order, for rows that all start at `phase`."""
    return thread_sums_twin(xf * xf, block, phase, vec_elems)


def thread_sums_twin(terms, block, phase, vec_elems):
    """Per-row sums of fp32 `terms` (rows, hidden) in the row core's reduction tree (row_core.cuh) for
    a row split at `phase` (elements past a 16-byte boundary) and fold width `block`: fold thread t adds
    its prefix element, then the partial sum of each of its body vectors t, t+block, ... (each vector's
    terms added in element order from 0), then its tail element; then pyrms::block_sum."""
    rows, hidden = terms.shape
    split = row_split(phase * (16 // vec_elems), hidden, 16 // vec_elems)
    acc = np.zeros((rows, block), dtype=F32)
    threads = np.arange(block)
    acc[:, : split.prefix] = acc[:, : split.prefix] + terms[:, : split.prefix]
    for k in range(-(-split.vectors // block)):
        vec = threads + k * block
        active = threads[vec < split.vectors]
        base = split.prefix + vec[active] * vec_elems
        partial = np.zeros((rows, active.size), dtype=F32)
        for j in range(vec_elems):
            partial = partial + terms[:, base + j]
        acc[:, active] = acc[:, active] + partial
    acc[:, : split.tail] = acc[:, : split.tail] + terms[:, split.tail_start: split.tail_start + split.tail]
    return block_sum_twin(acc)


def inv_rms_twin(sum_sq, hidden, epsilon):
    """pyrms::inv_rms: 1 / sqrt(sum / n + eps), each step rounded to fp32 (inf for a zero row at eps 0)."""
    with np.errstate(divide="ignore"):
        return F32(1.0) / np.sqrt(sum_sq / F32(hidden) + F32(epsilon))


def scale_twin(xf, inv, weight, dtype, *, gemma=False, round_once=False, out_dtype=None):
    """rms_scale in rms_norm.cu: the output in storage dtype from fp32 x, per-row inv and weight (of
    the storage dtype or float32: its fp32 value either way; None: no weight, every w = 1).
    out_dtype float32 (bf16/fp16 rows): the final product unrounded; the default rounding's
    intermediate round_T(x * inv) is the storage dtype's all the same (docs/numerics.md). A NaN output (a NaN
    or inf in the row) is the GPU's one NaN (_one_nan)."""
    dt = dtypes.get(dtype)
    wf = np.ones(xf.shape[1], dtype=F32) if weight is None else np.asarray(weight).astype(F32)
    if gemma:
        wf = F32(1.0) + wf
    with np.errstate(invalid="ignore"):  # 0 * inf = NaN, as on the GPU
        xn = xf * inv[:, None]
    if not round_once:
        xn = xn.astype(dt.numpy).astype(F32)
    return _one_nan((xn * wf).astype(_out(dt, out_dtype).numpy))


def _out(dt: dtypes.DType, out_dtype) -> dtypes.DType:
    """The output's dtype: the rows' (None), or float32 beside bf16/fp16 rows (plan.out_kind's rule)."""
    return dtypes.get(out_dtype) if out_dtype is not None else dt


def rms_norm_twin(x, weight, epsilon, *, block, row_phases=0, gemma=False, round_once=False, out_dtype=None):
    """Bit-exact twin of rms_norm.cu.

    x: (rows, hidden) in the storage dtype (numpy float16/float32 or ml_dtypes.bfloat16);
    block: the launch's threads per block; row_phases: each input row's position inside its
    16-byte vector, in elements (an int for all rows, or one per row); out_dtype: float32 for the fp32
    output of bf16/fp16 rows (scale_twin), None for the rows' dtype. Out's alignment changes no arithmetic.
    """
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    xf = x.astype(F32)
    _, inv = row_stats_twin(xf, epsilon, block, row_phases, dt.vec_elems)
    return scale_twin(xf, inv, weight, dt, gemma=gemma, round_once=round_once, out_dtype=out_dtype)


def row_stats_twin(xf, epsilon, block, row_phases, vec_elems, *, centered=False):
    """pyrms::row_stats per row of fp32 xf: (mean, inv), mean = 0 unless centered (LayerNorm).
    row_phases: each row's position inside its 16-byte vector (an int for all rows, or one per row)."""
    rows, hidden = xf.shape
    phases = np.broadcast_to(np.asarray(row_phases, dtype=np.int64), (rows,))
    mean = np.zeros(rows, dtype=F32)
    inv = np.empty(rows, dtype=F32)
    for phase in np.unique(phases):
        sel = phases == phase
        if centered:
            mean[sel] = thread_sums_twin(xf[sel], block, int(phase), vec_elems) / F32(hidden)
            dev = xf[sel] - mean[sel, None]
            inv[sel] = inv_rms_twin(thread_sums_twin(dev * dev, block, int(phase), vec_elems), hidden, epsilon)
        else:
            inv[sel] = inv_rms_twin(sum_squares_twin(xf[sel], block, int(phase), vec_elems), hidden, epsilon)
    return mean, inv


def seed_rms_norm_cpu(x, weight, epsilon):
    """The seed C++ program's CPU reference (``rms_norm_cpu``), reproduced bit for bit.

    A sequential fp32 sum (``np.add.accumulate`` adds strictly left to right, unlike ``np.sum``);
    the host ``rsqrtf`` of CUDA's math_functions.hpp, which is ``(float)(1.0 / sqrt((double)a))``;
    then ``y = x * scale * w`` in fp32, converted to the storage dtype.
    """
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    xf = x.astype(F32)
    hidden = xf.shape[1]
    variance = np.add.accumulate(xf * xf, axis=1, dtype=F32)[:, -1]
    scale = (1.0 / np.sqrt((variance / F32(hidden) + F32(epsilon)).astype(np.float64))).astype(F32)
    return (xf * scale[:, None] * np.asarray(weight).astype(F32)).astype(dt.numpy)


# --- fused residual add ---------------------------------------------------------------------------


def fused_add_rms_norm_ref(x, residual, weight, epsilon, *, gemma=False):
    """float64: (rms_norm(x + residual), x + residual), the sum not rounded."""
    total = _as_2d(x).astype(np.float64) + _as_2d(residual).astype(np.float64)
    return rms_norm_ref(total, weight, epsilon, gemma=gemma), total


def _one_nan(a: np.ndarray) -> np.ndarray:
    """a with every NaN the GPU's one NaN, in place: its fp32 add returns 0x7FFFFFFF whatever the operands'
    payloads, which bf16 and fp16 keep as 0x7FFF; numpy would carry an operand's payload (and ml_dtypes
    writes 0x7FC0)."""
    nan = np.isnan(a.astype(F32))
    if nan.any():
        word = np.uint16 if a.dtype.itemsize == 2 else np.uint32
        a.view(word)[nan] = word(0x7FFF if word is np.uint16 else 0x7FFFFFFF)
    return a


def _fp32_sum(x, residual) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf + -inf = NaN, as on the GPU
        return _one_nan(x.astype(F32) + residual.astype(F32))


def rounded_sum(x, residual):
    """The fused add's new residual (vLLM's semantics): round_T(fp32(x) + fp32(residual)), [rows, hidden],
    a NaN sum the GPU's one NaN (_one_nan)."""
    x, residual = _as_2d(x), _as_2d(residual)
    return _one_nan(_fp32_sum(x, residual).astype(x.dtype))


def fused_add_rms_norm_twin(x, residual, weight, epsilon, *, block, residual_phases=0, input_phases=0, gemma=False,
                            round_once=False, sum_precision="rounded", out_dtype=None):
    """Bit-exact twin of fused_add_rms_norm.cu: (new input, new residual), each in its own dtype.

    sum_precision "rounded" (fused_add_rms_norm_kernel, vLLM's): the sum rounded to the dtype is stored
    and normalized, with the sum of squares split at the residual's phases. "fp32"
    (fused_add_rms_norm_fp32_sum_kernel: FlashInfer's, SGLang's; with a float32 residual beside bf16 or
    fp16 rows, QuACK's and Transformer Engine's): the fp32 sum (numpy's float32 add is __fadd_rn) is
    normalized, split at the input's phases, and stored in the residual's dtype (rounded, or exactly).
    A float32 x has one semantics: both are the first. A NaN sum is the GPU's one NaN (_one_nan).
    out_dtype float32 (the rounded sum only, as plan_fused_add_rms_norm): the normalized rows as the
    out-of-place kernel's fp32 out (rms_norm_twin's)."""
    x, residual = _as_2d(x), _as_2d(residual)
    if sum_precision not in ("rounded", "fp32"):
        raise ValueError(f"sum_precision must be 'rounded' or 'fp32', got {sum_precision!r}")
    if residual.dtype != x.dtype:
        if sum_precision == "rounded":
            raise ValueError("a residual of another dtype than x's (float32) takes sum_precision='fp32'")
    elif sum_precision == "rounded" or x.dtype == F32:
        total = rounded_sum(x, residual)
        out = rms_norm_twin(total, weight, epsilon, block=block, row_phases=residual_phases, gemma=gemma,
                            round_once=round_once, out_dtype=out_dtype)
        return out, total
    if _out(dtypes.get(x.dtype), out_dtype) != dtypes.get(x.dtype):
        raise ValueError("an fp32 out_dtype takes sum_precision='rounded' (the fp32 sum is written over the input)")
    total = _fp32_sum(x, residual)
    dt = dtypes.get(x.dtype)
    _, inv = row_stats_twin(total, epsilon, block, input_phases, dt.vec_elems)
    return (scale_twin(total, inv, weight, dt, gemma=gemma, round_once=round_once),
            _one_nan(total.astype(residual.dtype)))


# --- LayerNorm ------------------------------------------------------------------------------------


def layer_norm_ref(x, weight, bias, epsilon):
    """float64 LayerNorm of the rows of x: (x - mean) / sqrt(var + eps) * w + b (population variance;
    weight None: w = 1, bias None: b = 0)."""
    x64 = _as_2d(x).astype(np.float64)
    centered = x64 - x64.mean(axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean(centered * centered, axis=1, keepdims=True) + float(epsilon))
    w64 = 1.0 if weight is None else np.asarray(weight).astype(np.float64)
    b64 = 0.0 if bias is None else np.asarray(bias).astype(np.float64)
    return centered * inv * w64 + b64


def layer_norm_twin(x, weight, bias, epsilon, *, block, row_phases=0, out_dtype=None):
    """Bit-exact twin of layer_norm_kernel: fp32 two-pass statistics, one rounding at the end (none for an
    fp32 out_dtype beside bf16/fp16 rows). bias None: no bias term (no addition of 0, which would turn -0
    into +0); weight None: no weight (the kernel's product by 1, exact). weight and bias: of the storage
    dtype or float32, their fp32 values either way. A NaN output is the GPU's one NaN (_one_nan), as rms_norm's."""
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    xf = x.astype(F32)
    mean, inv = row_stats_twin(xf, epsilon, block, row_phases, dt.vec_elems, centered=True)
    y = (xf - mean[:, None]) * inv[:, None]
    if weight is not None:
        y = y * np.asarray(weight).astype(F32)
    if bias is not None:
        y = y + np.asarray(bias).astype(F32)
    return _one_nan(y.astype(_out(dt, out_dtype).numpy))


# --- backward -------------------------------------------------------------------------------------


def _weight64(weight, gemma=False):
    """A weight as float64 (1 + weight for Gemma), or 1 for None (no weight)."""
    if weight is None:
        return np.float64(1.0)
    return np.asarray(weight).astype(np.float64) + (1.0 if gemma else 0.0)


def rms_norm_backward_ref(dy, x, weight, epsilon, *, gemma=False):
    """float64 (dx, dweight) of RMSNorm: dx = r * (g - x_hat * mean(x_hat * g)), g = w * dy,
    dweight = sum over rows of dy * x_hat (docs/family.md). weight None: g = dy, and (dx,) alone."""
    dy64, x64 = _as_2d(dy).astype(np.float64), _as_2d(x).astype(np.float64)
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + float(epsilon))
    x_hat, g = x64 * inv, _weight64(weight, gemma) * dy64
    dx = inv * (g - x_hat * np.mean(x_hat * g, axis=1, keepdims=True))
    return (dx,) if weight is None else (dx, (dy64 * x_hat).sum(axis=0))


def layer_norm_backward_ref(dy, x, weight, epsilon):
    """float64 (dx, dweight, dbias) of LayerNorm: dx = r * (g - mean(g) - x_hat * mean(x_hat * g)).
    weight None: g = dy, and (dx, dbias)."""
    dy64, x64 = _as_2d(dy).astype(np.float64), _as_2d(x).astype(np.float64)
    centered = x64 - x64.mean(axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean(centered * centered, axis=1, keepdims=True) + float(epsilon))
    x_hat, g = centered * inv, _weight64(weight) * dy64
    dx = inv * (g - g.mean(axis=1, keepdims=True) - x_hat * np.mean(x_hat * g, axis=1, keepdims=True))
    dweight = () if weight is None else ((dy64 * x_hat).sum(axis=0),)
    return (dx, *dweight, dy64.sum(axis=0))


def chunk_sums_twin(terms, chunk_rows):
    """Per chunk of chunk_rows rows: ((0 + t[cC]) + t[cC+1]) + ... in fp32 (norm_backward.cuh)."""
    rows, hidden = terms.shape
    chunks = -(-rows // chunk_rows)
    acc = np.zeros((chunks, hidden), dtype=F32)
    for j in range(chunk_rows):
        index = np.arange(chunks) * chunk_rows + j
        ok = index < rows
        acc[ok] = acc[ok] + terms[index[ok]]
    return acc


def sum_partials_twin(partials):
    """sum_partials_kernel: lane y of 32 sums chunks y, y+32, ... in order; then the lanes in order."""
    chunks, hidden = partials.shape
    lanes = np.zeros((32, hidden), dtype=F32)
    for k in range(-(-chunks // 32)):
        index = k * 32 + np.arange(32)
        ok = index < chunks
        lanes[ok] = lanes[ok] + partials[index[ok]]
    total = np.zeros(hidden, dtype=F32)
    for lane in lanes:
        total = total + lane
    return total


def norm_backward_twin(dy, x, weight, epsilon, *, block, fold, x_phases=0, weight_phase=0, chunk_rows,
                       layer_norm=False, gemma=False, grad_dtype=None):
    """Bit-exact twin of rms_norm_backward.cu / layer_norm_backward_kernel and sum_partials_kernel.

    Returns (dx, dweight) for RMSNorm, (dx, dweight, dbias) for LayerNorm; dx in the storage dtype,
    the parameter gradients in grad_dtype (default: the storage dtype). block: the launch's threads per
    block (the tree of the row sums of x_hat * g and g); fold: the statistics' fold width (the forward's
    block, NormBackwardPlan.stats_fold); x_phases: each input row's phase (the statistics' order);
    weight_phase: the weight's (the order of the row sums of x_hat * g and g); chunk_rows: the plan's.
    dy's and dx's alignment and rows_per_block change no arithmetic, so they are not arguments.

    weight None: no weight (the kernels' W = void): g = dy, no dweight, so (dx,) for RMSNorm and (dx,
    dbias) for LayerNorm; the row sums are split as at a 16-byte aligned weight (weight_phase 0, the
    only one allowed), so dx equals a weighted backward's with an aligned weight of ones, bit for bit.
    """
    if weight is None and (gemma or weight_phase):
        raise ValueError(f"weight=None splits its columns at phase 0 and has no gemma; got weight_phase={weight_phase}, "
                         f"gemma={gemma}")
    dy, x = _as_2d(dy), _as_2d(x)
    dt = dtypes.get(x.dtype)
    hidden = x.shape[1]
    xf, dyf = x.astype(F32), dy.astype(F32)
    wf = F32(1.0) if weight is None else np.asarray(weight).astype(F32)
    if gemma:
        wf = F32(1.0) + wf
    mean, inv = row_stats_twin(xf, epsilon, fold, x_phases, dt.vec_elems, centered=layer_norm)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN rows propagate as on the GPU
        x_hat = ((xf - mean[:, None]) if layer_norm else xf) * inv[:, None]
        g = wf * dyf
        dot_mean = thread_sums_twin(x_hat * g, block, weight_phase, dt.vec_elems) / F32(hidden)
        if layer_norm:
            g = g - thread_sums_twin(g, block, weight_phase, dt.vec_elems)[:, None] / F32(hidden)
        dx = (inv[:, None] * (g - x_hat * dot_mean[:, None])).astype(dt.numpy)
        terms = ([] if weight is None else [dyf * x_hat]) + ([dyf] if layer_norm else [])
    out = dtypes.get(grad_dtype).numpy if grad_dtype is not None else dt.numpy
    return (dx, *(sum_partials_twin(chunk_sums_twin(t, chunk_rows)).astype(out) for t in terms))


# --- quantized outputs ----------------------------------------------------------------------------
# The output step a quantizing kernel applies to the fp32 normalized values y (after the RMSNorm's
# fp32 arithmetic, before any storage rounding). docs/numerics.md, "Quantized outputs", gives the
# formulas and the vLLM sources each one matches.


def _quant_rows(y) -> np.ndarray:
    """y as a (rows, hidden) float32 array; TypeError for another dtype, which would hide a rounding."""
    y = _as_2d(y)
    if y.dtype != F32 or y.ndim != 2:
        raise TypeError(f"y must be a float32 array of shape (rows, hidden), got {y.dtype} {y.shape}")
    return y


def _quantize(y: np.ndarray, scale: np.ndarray, qt: dtypes.QuantDType, *, divide: bool) -> np.ndarray:
    """q = convert(saturate(y / scale)) or convert(saturate(y * (1/scale))), scale broadcast against y.

    fp8: clamp to [-qmax, qmax], then round to nearest even; NaN stays NaN (the canonical positive NaN,
    ml_dtypes' float32 NaN conversion); the clamp makes ±inf and finite overflow ±qmax (cvt's satfinite).
    int8: round to nearest even, then clamp to [-128, 127]; NaN becomes 0 (cvt.rni.sat.s8.f32).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf/inf and 0*inf: NaN, as on the GPU
        z = y / scale if divide else y * (F32(1.0) / scale)
        if qt.integer:
            z = np.clip(np.rint(z), qt.qmin, qt.qmax)
            z = np.where(np.isnan(z), F32(0.0), z)  # numpy's NaN -> int8 cast is undefined
        else:
            z = np.clip(z, qt.qmin, qt.qmax)  # np.clip keeps NaN; ml_dtypes would turn >= 480 into NaN
            z = np.where(np.isnan(z), F32(np.nan), z)  # drop NaN's sign: the kernel writes one NaN pattern
    return z.astype(qt.numpy)


def _abs_max(y: np.ndarray, axis: int) -> np.ndarray:
    """fmaxf-reduction of |y| from 0: NaN is skipped (fmaxf returns the other operand), and the maximum is
    exact, so the reduction order of the kernel does not matter."""
    return np.fmax.reduce(np.abs(y), axis=axis, initial=F32(0.0))


def _dynamic_scale(amax: np.ndarray, qt: dtypes.QuantDType) -> np.ndarray:
    """fmaxf(amax / qmax, min_scale), both fp32 operations (vLLM's fused per-token/per-block kernels)."""
    return np.fmax(amax / qt.qmax, qt.min_scale)


def _pow2_ceil(s: np.ndarray) -> np.ndarray:
    """The power of two at or above each positive float32 s (ue8m0): the exponent is raised by one when the
    mantissa is not zero, which is exp2f(ceilf(log2f(s))) bit for bit for normal s (and keeps inf)."""
    bits = s.view(np.uint32)
    exponent = (bits >> np.uint32(23)) & np.uint32(0xFF)
    exponent = exponent + ((bits & np.uint32(0x7FFFFF)) != 0).astype(np.uint32)
    return (exponent << np.uint32(23)).view(F32)


def quantize_static(y, scale, out_dtype) -> np.ndarray:
    """One fp32 scale for the whole tensor: q = saturate(round(y / scale)), spelled as vLLM's kernels do.

    float8: ``y * (1/scale)``, the reciprocal an fp32 division (``__fdiv_rn(1, s)``) and the product
    ``__fmul_rn`` (vLLM scaled_fp8_quant_kernel_strided and rms_norm_static_fp8_quant); int8:
    ``y / scale`` (``__fdiv_rn``, vLLM static_scaled_int8_quant_kernel). scale is rounded to float32
    first (the kernel reads an fp32 scale); it must be finite and > 0 (ValueError otherwise).
    """
    qt = dtypes.quantized(out_dtype)
    y = _quant_rows(y)
    s = F32(scale)
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a finite float32 > 0, got {scale!r} (float32 {s!r})")
    return _quantize(y, s, qt, divide=qt.integer)


def quantize_per_token(y, out_dtype, scale_ub=None) -> tuple[np.ndarray, np.ndarray]:
    """One fp32 scale per row from its absolute maximum: (q, scales[rows]).

    amax = fmaxf over |y| (NaN skipped); with scale_ub, amax = fminf(amax, scale_ub) (fp8 only, as vLLM
    refuses scale_ub for int8); scale = fmaxf(amax / qmax, min_scale), min_scale = 1/(qmax*512) for fp8
    and FLT_EPSILON for int8. Then fp8: ``y / scale`` (``__fdiv_rn``); int8: ``y * (1/scale)``, the
    reciprocal ``__fdiv_rn(1, scale)`` (vLLM rms_norm_dynamic_per_token_quant). scales are the divisors
    written out, so ``q * scale`` dequantizes.
    """
    qt = dtypes.quantized(out_dtype)
    y = _quant_rows(y)
    amax = _abs_max(y, axis=1)
    if scale_ub is not None:
        if qt.integer:
            raise ValueError("scale_ub applies to float8 outputs only (as in vLLM), not int8")
        ub = F32(scale_ub)
        if not (np.isfinite(ub) and ub > 0):
            raise ValueError(f"scale_ub must be a finite float32 > 0, got {scale_ub!r}")
        amax = np.fmin(amax, ub)
    scales = _dynamic_scale(amax, qt)
    return _quantize(y, scales[:, None], qt, divide=not qt.integer), scales


def quantize_per_group(y, out_dtype, group, ue8m0=False, column_major=False) -> tuple[np.ndarray, np.ndarray]:
    """One fp32 scale per `group` consecutive elements of a row: (q, scales[rows, hidden // group]).

    group is 64 or 128 and must divide hidden (ValueError otherwise: a ragged last group has no vLLM peer).
    Each group's scale is per-token's formula on that group (no scale_ub); with ue8m0 it is then rounded
    up to a power of two (DeepSeek's UE8M0 scales, vLLM per_token_group_quant ``scale_ue8m0``), and the
    division by it is exact. The element step is per-token's (fp8 divides, int8 multiplies by the
    reciprocal). scales has the logical shape (rows, groups) either way; column_major: its memory is
    (groups, rows) row-major (``scales.T`` is C-contiguous), vLLM's transposed scale layout.
    """
    qt = dtypes.quantized(out_dtype)
    y = _quant_rows(y)
    rows, hidden = y.shape
    if group not in QUANT_GROUPS:
        raise ValueError(f"group must be one of {QUANT_GROUPS}, got {group!r}")
    if hidden % group:
        raise ValueError(f"group {group} does not divide hidden {hidden}")
    grouped = y.reshape(rows, hidden // group, group)
    scales = _dynamic_scale(_abs_max(grouped, axis=2), qt)
    if ue8m0:
        scales = _pow2_ceil(scales)
    q = _quantize(grouped, scales[..., None], qt, divide=not qt.integer).reshape(rows, hidden)
    return q, (np.ascontiguousarray(scales.T).T if column_major else scales)


def normalized_twin(x, weight, epsilon, *, block, row_phases=0, round_input=False) -> np.ndarray:
    """The fp32 values rms_norm_quant.cu quantizes (its `normalized`): (x * inv_rms) * w in fp32, or with
    round_input rms_norm's output (the seed's rounding: round(round(x * inv_rms) * w)) as fp32 (vLLM's).
    x: (rows, hidden) in the storage dtype; weight of that dtype; block and row_phases as rms_norm_twin."""
    x = _as_2d(x)
    dt = dtypes.get(x.dtype)
    xf = x.astype(F32)
    _, inv = row_stats_twin(xf, epsilon, block, row_phases, dt.vec_elems)
    if round_input:
        return scale_twin(xf, inv, weight, dt).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf = NaN, as on the GPU
        return (xf * inv[:, None]) * np.asarray(weight).astype(F32)


def rms_norm_quant_twin(x, weight, epsilon, out_dtype, *, block, row_phases=0, mode="static", scale=None,
                        scale_ub=None, round_input=False, group=128, ue8m0=False) -> tuple[np.ndarray, np.ndarray | None]:
    """Bit-exact twin of rms_norm_quant_kernel (and of the group kernel): (q, per-row scales, (rows, groups)
    scales, or None for static): normalized_twin, then quantize_static(y, scale), quantize_per_token(y,
    scale_ub) or quantize_per_group(y, group, ue8m0) (no scale_ub)."""
    y = normalized_twin(x, weight, epsilon, block=block, row_phases=row_phases, round_input=round_input)
    if mode == "static":
        return quantize_static(y, scale, out_dtype), None
    if mode == "per_token":
        return quantize_per_token(y, out_dtype, scale_ub)
    if mode == "per_group":
        if scale_ub is not None:
            raise ValueError("scale_ub applies to mode='per_token' only")
        return quantize_per_group(y, out_dtype, group, ue8m0)
    raise ValueError(f"mode must be 'static', 'per_token' or 'per_group', got {mode!r}")


def fused_add_rms_norm_quant_twin(x, residual, weight, epsilon, out_dtype, *, block, residual_phases=0, **options):
    """Bit-exact twin of fused_add_rms_norm_quant_kernel: (q, scales or None, new residual): the rounded sum
    (fused_add_rms_norm_twin's), quantized as rms_norm_quant_twin (options: its mode, scale, ...)."""
    total = rounded_sum(x, residual)
    q, scales = rms_norm_quant_twin(total, weight, epsilon, out_dtype, block=block, row_phases=residual_phases,
                                    **options)
    return q, scales, total
