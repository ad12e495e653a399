// LayerNorm, forward and backward (one file: both are built on the same row statistics).
//
//   mean = sum(x) / n,  var = sum((x - mean)^2) / n  (two passes, over registers),  inv = 1 / sqrt(var + eps)
//   forward:   y  = round_O(((x - mean) * inv) * w + b)      all in fp32, rounded once at the end
//              (BIAS = false: y = round_O(((x - mean) * inv) * w), no addition, so -0 stays -0 as in PyTorch;
//              W = void, no weight: w = 1, as torch.nn.LayerNorm(elementwise_affine=False); w and b of
//              W = float beside bf16/fp16 rows: gamma and beta read exactly; O, the output's type, T or
//              float beside bf16/fp16 rows, where round_O is exact)
//   backward:  x_hat = (x - mean) * inv,  g = w * dy
//              dx = inv * ((g - mean(g)) - x_hat * mean(x_hat * g))
//              dw = sum over rows of dy * x_hat,  db = sum over rows of dy   (fp32, fixed order)
// Every step is one explicitly rounded fp32 operation (__fsub_rn, __fmul_rn, ...: no FMA), so
// pyrms.reference.layer_norm_twin and norm_backward_twin reproduce the kernels bit for bit.
//
// layer_norm_kernel<T, CACHE, SPREAD, BIAS, EARLY_WEIGHTS, ALIGNED>: one block per row on the row core
// (row_core.cuh), with rms_norm.cu's variants. Pass 1 (row_stats) splits the row at the input's 16-byte
// boundaries and keeps the held body vectors in registers for both statistics passes; pass 2
// (write_row) splits at the output's boundaries, so every body store is 16 bytes wide, and loads input,
// weight and bias at the widest width their alignment relative to the output allows. In place
// (out == input) is allowed. The planner picks the fold width and CACHE from the hidden size only, and
// every variant computes the row core's one tree, so a row's result does not depend on its batch.
//
// layer_norm_backward_kernel<T, V, W, DBIAS> + sum_partials_kernel<OutT>: see norm_backward.cuh (dw and
// db are two planes of the workspace, summed by two launches of sum_partials_kernel). W = void: no
// weight (g = dy, no dw); DBIAS = false (without a weight only) sums nothing: no workspace, no kernel 2.
#include "norm_backward.cuh"

namespace pyrms {

// bias is not read when BIAS is false (it may be null).
// W: the weight's type, T, float (bf16/fp16 rows; the bias is then fp32 too: row_core.cuh's Bias) or void
// (no weight: y = round_O((x - mean) * inv [+ b]), weight not read, the bias of T).
// O: the output's type, T or float (bf16/fp16 rows; no in place then).
template <typename T, int CACHE, int SPREAD, bool BIAS, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T, typename O = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) layer_norm_kernel(
    O* out, const T* input, const W* __restrict__ weight, const Bias<T, W>* __restrict__ bias, float epsilon,
    int hidden, long long input_stride, long long out_stride) {
    using Shape = RowShape<CACHE, SPREAD, ALIGNED>;
    __shared__ float scratch[2][32];
    __shared__ float partials[Shape::PARTIALS];
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    O* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    const Shape sh;
    const RowSplit s = sh.split(in_row, hidden);
    const RowIn<T, false> src{in_row};
    Pack<T> held[Shape::SLOTS];
    WeightVec<T, W> held_w[Shape::SLOTS];
    load_held(sh, s, src, held);
    if constexpr (EARLY_WEIGHTS) load_held_weights(sh, out_row, in_row, weight, hidden, held_w);
    const RowStats st = row_stats<T, CACHE, SPREAD, ALIGNED, true>(sh, s, hidden, epsilon, src, held, scratch[0], scratch[1],
                                                          partials);
    write_row<T, W, CACHE, SPREAD, ALIGNED, BIAS, false, EARLY_WEIGHTS>(sh, out_row, in_row, weight, bias, hidden, held,
                                                                held_w, [st](T x, float w, Bias<T, W> b) {
        // without a weight, w = 1: the product by 1 is exact; b: the bias, of T or float (T() without one,
        // unused). A named type, not auto: NVRTC 13.0 refuses generic lambdas in device code.
        const float scaled = __fmul_rn(__fmul_rn(__fsub_rn(to_float(x), st.mean), st.inv), w);
        return from_float<O>(BIAS ? __fadd_rn(scaled, to_float(b)) : scaled);
    });
}

// W: T, or void (no weight; weight not read). DBIAS: sum dbias (always with a weight: one variant, whose
// dbias plane the launcher sums only when asked); partials are not read when nothing is summed.
template <typename T, int V, typename W = T, bool DBIAS = true>
__global__ void __launch_bounds__(backward_max_threads(V, true), 1) layer_norm_backward_kernel(
    T* grad_input, float* partials, const T* grad_output, const T* input, const W* __restrict__ weight,
    float epsilon, int rows, int hidden, long long grad_input_stride, long long grad_output_stride,
    long long input_stride, int chunk_rows, int rows_per_block, long long ws_stride, int sums_in_shared,
    int fold) {
    static_assert(DBIAS || Weightless<W>::value, "with a weight, the kernel sums dbias too");
    norm_backward_rows<T, V, true, false, W, DBIAS>(grad_input, partials, grad_output, input, weight, epsilon, rows,
                                                    hidden, grad_input_stride, grad_output_stride, input_stride,
                                                    chunk_rows, rows_per_block, ws_stride, sums_in_shared, fold);
}

}  // namespace pyrms
