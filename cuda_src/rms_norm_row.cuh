// The RMSNorm of one row on the row core (row_core.cuh): its output step (rms_scale) and the two
// passes, shared by the plain and the residual-add kernels, which differ only in how pass 1 reads the
// row (a Source) and in their cache hints, and by the quantizing kernels (quant.cuh), which
// differ in the output hook. Formulas and rounding: docs/numerics.md, and the
// plain kernel's opening comment.
#pragma once
#include "row_core.cuh"

namespace pyrms {

// w: the weight as fp32 (1 without one: the product by 1 is exact, so y = round_T(x * inv) then).
// x: of T, or an fp32 value that was never rounded to T (added_row.cuh's fp32 sums).
// O: the output's type: T, or float beside bf16/fp16 rows, where the product is stored as computed
// (round_O is exact), so round_T of an fp32 output is the T output, bit for bit. The intermediate
// round_T(x * inv) of the default (not ROUND_ONCE) rounding is T's whatever O is: Hugging Face LLaMA's
// `weight * hidden.to(input_dtype)`, which an fp32 weight promotes to an fp32 result.
template <typename T, bool GEMMA, bool ROUND_ONCE, typename O = T, typename X>
__device__ __forceinline__ O rms_scale(X x, float w, float inv) {
    const float wf = GEMMA ? __fadd_rn(1.0f, w) : w;
    float xn = __fmul_rn(to_float(x), inv);
    if (!ROUND_ONCE) xn = to_float(from_float<T>(xn));
    return from_float<O>(__fmul_rn(xn, wf));
}

__device__ __forceinline__ float square(float x) { return __fmul_rn(x, x); }

// Pass 1 of the RMSNorm of one row: loads the thread's held vectors of the row from `src` (a row core
// Source) into `held` (Pack<T>, or the Source's own pack: row_core.cuh) and returns inv_rms; with EARLY_WEIGHTS, also their weights at out_row's split into
// held_w (out_row: of any element type O, as write_row then walks it). The output step is the caller's:
// rms_norm_row's store below, or a quantizing one (quant.cuh).
// W: the weight's type (T, float, or void: no weight; row_core.cuh's WeightVec). LANES: packed rows (RowShape).
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, bool EARLY_WEIGHTS, int LANES, typename O,
          typename Src, typename H>
__device__ __forceinline__ float row_inv_rms(const RowShape<CACHE, SPREAD, ALIGNED, LANES>& sh, const O* out_row,
                                             const T* x_row, const Src& src, const W* __restrict__ weight, float epsilon,
                                             int hidden, H (&held)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS],
                                             WeightVec<T, W> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED, LANES>::SLOTS]) {
    __shared__ float scratch[32];
    __shared__ float partials[RowShape<CACHE, SPREAD, ALIGNED, LANES>::PARTIALS];
    const RowSplit s = sh.split(x_row, hidden);
    load_held(sh, s, src, held);
    if constexpr (EARLY_WEIGHTS) load_held_weights(sh, out_row, x_row, weight, hidden, held_w);
    return inv_rms(row_sum(sh, s, hidden, src, held, scratch, partials, square), hidden, epsilon);
}

// The RMSNorm of one row, read from `src` and written to out_row: the body of rms_norm_kernel and of
// fused_add_rms_norm_kernel, which differ only in their source (and cache hints).
// x_row is where pass 2 re-reads the row values that are not held. O: out's type (rms_scale). rstd_out: where
// the row's inv_rms is stored (by thread 0: one row per block), for a backward to read; null: nowhere.
template <typename T, typename W, int CACHE, int SPREAD, bool ALIGNED, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS,
          bool STREAMING, int LANES = 0, typename O, typename Src>
__device__ __forceinline__ void rms_norm_row(O* out_row, const T* x_row, const Src& src, const W* __restrict__ weight,
                                             float epsilon, int hidden, float* rstd_out = nullptr) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED, LANES>;
    const Shape sh;
    Pack<T> held[Shape::SLOTS];
    WeightVec<T, W> held_w[Shape::SLOTS];
    const float inv = row_inv_rms<T, W, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, out_row, x_row, src, weight, epsilon,
                                                                               hidden, held, held_w);
    if (rstd_out != nullptr && threadIdx.x == 0) *rstd_out = inv;
    write_row<T, W, CACHE, SPREAD, ALIGNED, false, STREAMING, EARLY_WEIGHTS>(
        sh, out_row, x_row, weight, nullptr, hidden, held, held_w,
        [inv](T x, float w, T) { return rms_scale<T, GEMMA, ROUND_ONCE, O>(x, w, inv); });
}

}  // namespace pyrms
