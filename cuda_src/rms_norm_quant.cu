// RMSNorm with a quantized output (fp8 e4m3fn / e5m2, int8), and the same after vLLM's residual add: the
// RMSNorm of rms_norm_row.cuh (the row core's two passes and reduction tree) with a quantizing output
// hook (quant.cuh) instead of rms_norm's store.
//
//   y[r, i] = (x[r, i] * inv_rms[r]) * w_i                        in fp32 (default: one rounding, the last)
//   y[r, i] = float(round_T(round_T(x[r, i] * inv_rms[r]) * w_i)) ROUND_INPUT: what vLLM's kernels quantize
//                                                                 (rms_norm's default output, as fp32)
//   STATIC:    q[r, i] = quantize(y[r, i], s), s one fp32 scale (an argument, or read from a pointer)
//   PER_TOKEN: s[r] = dynamic_scale(fminf(max_i |y[r, i]|, ub)) written to scales[r] (ub = +inf: none),
//              q[r, i] = quantize(y[r, i], s[r])
//   (fused add) residual[r, i] <- round_T(input[r, i] + residual[r, i]), x = that rounded sum
//   (fused_add_rms_norm.cu's semantics: the rounded sum is normalized; input is only read).
//
// inv_rms, the reduction tree and the planner are rms_norm's, so y's RMS is rms_norm's bit for bit.
// The maximum is a second block reduction after inv_rms, over y recomputed from the held registers
// (and re-read vectors); it is exact, so its order does not matter. Output vectors are Vec<T>::N
// quantized elements (8 bytes beside bf16/fp16 rows, 4 beside fp32), split at out's own boundaries of
// that size (write_row), so every pointer may be misaligned independently.
//
// Variants: T in {float, __half, __nv_bfloat16}; Q in {__nv_fp8_e4m3, __nv_fp8_e5m2, signed char (int8)}; MODE;
// ROUND_INPUT; CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED as in rms_norm.cu. The weight is of T. Cache hints as
// the unquantized kernels (rms_norm.cu: streaming; fused add: none), not measured here.
#include "added_row.cuh"
#include "quant.cuh"
#include "rms_norm_row.cuh"

namespace pyrms {

// The value that is quantized (see above); w is the weight as fp32.
template <typename T, bool ROUND_INPUT> __device__ __forceinline__ float normalized(T x, float w, float inv) {
    if constexpr (ROUND_INPUT) {
        return to_float(rms_scale<T, false, false>(x, w, inv));
    } else {
        return __fmul_rn(__fmul_rn(to_float(x), inv), w);
    }
}

// max |y| over the row, returned to every thread of the block: the row walked at x's own split (so its
// body vectors are the held ones), y(x, w) recomputed for each element.
template <typename T, int CACHE, int SPREAD, bool ALIGNED, typename Y>
__device__ __forceinline__ float row_amax(const RowShape<CACHE, SPREAD, ALIGNED>& sh, const T* x, const T* __restrict__ w,
                                          int n, const Pack<T> (&held)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS],
                                          const WeightVec<T, T> (&held_w)[RowShape<CACHE, SPREAD, ALIGNED>::SLOTS], Y y) {
    __shared__ float scratch[32];  // not the reduction's: no barrier needed after it
    float m = 0.0f;
    for_each_out<T, T, CACHE, SPREAD, ALIGNED, false, false>(
        sh, x, x, w, nullptr, n, held, held_w, [&](int i) { m = fmaxf(m, fabsf(y(x[i], weight_at(w, i)))); },
        [&](const Pack<T>& xv, const WeightVec<T, T>& wv, int, int) {
#pragma unroll
            for (int j = 0; j < Vec<T>::N; ++j) m = fmaxf(m, fabsf(y(xv.e[j], wv.at(j))));
        });
    return block_max(m, scratch, blockDim.x >> 5);
}

// One row normalized from `src` and quantized into out_row. given: the static scale, or per-token's upper
// bound on amax (+inf: none); row_scale: where per-token writes the row's scale.
template <typename T, typename Q, int MODE, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED,
          bool STREAMING, typename Src>
__device__ __forceinline__ void rms_norm_quant_row(Q* out_row, const T* x_row, const Src& src, const T* __restrict__ weight,
                                                   float epsilon, int hidden, float given, float* row_scale) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    const Shape sh;
    Pack<T> held[Shape::SLOTS];
    WeightVec<T, T> held_w[Shape::SLOTS];
    const float inv = row_inv_rms<T, T, CACHE, SPREAD, ALIGNED, EARLY_WEIGHTS>(sh, out_row, x_row, src, weight, epsilon,
                                                                               hidden, held, held_w);
    const auto y = [inv](T x, float w) { return normalized<T, ROUND_INPUT>(x, w, inv); };
    float s = given;
    if constexpr (MODE == PER_TOKEN) {
        s = dynamic_scale<Q>(fminf(row_amax(sh, x_row, weight, hidden, held, held_w, y), given));
        if (threadIdx.x == 0) *row_scale = s;
    }
    const Scaled<Q, divide_for<Q, MODE>()> quantize(s);
    write_row<T, T, CACHE, SPREAD, ALIGNED, false, STREAMING, EARLY_WEIGHTS>(
        sh, out_row, x_row, weight, nullptr, hidden, held, held_w, [&](T x, float w, T) { return quantize(y(x, w)); });
}

// given_ptr: where to read `given` instead (a device scale), or null.
template <typename T, typename Q, int MODE, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_quant_kernel(
    Q* out, const T* input, const T* __restrict__ weight, float* scales, const float* given_ptr, float given,
    float epsilon, int hidden, long long input_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, true>(
        out_row, in_row, RowIn<T, true>{in_row}, weight, epsilon, hidden, given_ptr ? *given_ptr : given,
        scales + blockIdx.x);
}

template <typename T, typename Q, int MODE, bool ROUND_INPUT, int CACHE, int SPREAD, bool EARLY_WEIGHTS, bool ALIGNED>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_quant_kernel(
    Q* out, const T* input, T* residual, const T* __restrict__ weight, float* scales, const float* given_ptr,
    float given, float epsilon, int hidden, long long input_stride, long long residual_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    Q* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    const AddedRow<T> sums{in_row, res_row,
                           ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (Vec<T>::N - 1))};
    rms_norm_quant_row<T, Q, MODE, ROUND_INPUT, CACHE, SPREAD, EARLY_WEIGHTS, ALIGNED, false>(
        out_row, res_row, sums, weight, epsilon, hidden, given_ptr ? *given_ptr : given, scales + blockIdx.x);
}

}  // namespace pyrms
