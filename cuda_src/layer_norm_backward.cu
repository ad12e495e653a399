// LayerNorm backward: the row statistics recomputed in the forward's order (pyrms::row_stats with the forward's
// fold width), so they are the forward's bit for bit; or read from `mean` and `rstd` (fp32, one per row; null:
// recompute), the forward's own when it saved them (layer_norm_kernel's): the same values, so the same bits, and
// two block reductions less per row.
//
//   x_hat = (x - mean) * inv,  g = w * dy
//   dx = inv * ((g - mean(g)) - x_hat * mean(x_hat * g))
//   dw = sum over rows of dy * x_hat,  db = sum over rows of dy   (fp32, fixed order)
// Every step is one explicitly rounded fp32 operation (__fsub_rn, __fmul_rn, ...: no FMA), so
// norm_backward_twin (the backward family's twin, in pyrms.reference) reproduces the kernels bit for bit.
//
// layer_norm_backward_kernel<T, V, W, DBIAS, G> + sum_partials_kernel<OutT>: see norm_backward.cuh (dw and
// db are two planes of the workspace, summed by two launches of sum_partials_kernel; few rows with their saved
// statistics take one launch of layer_norm_backward_few_kernel instead, the same bits). W = float: fp32
// gamma beside bf16/fp16 rows (dw, db in fp32); G = float: an fp32 dy. W = void: no
// weight (g = dy, no dw); DBIAS = false (without a weight only) sums nothing: no workspace, no kernel 2.
#include "norm_backward.cuh"

namespace pyrms {

// W: T, float, or void (no weight; weight not read). G: dy's type, T or float. DBIAS: sum dbias (always with a weight: one variant, whose
// dbias plane the launcher sums only when asked); partials are not read when nothing is summed.
template <typename T, int V, typename W = T, bool DBIAS = true, typename G = T>
__global__ void __launch_bounds__(backward_max_threads(V, true), 1) layer_norm_backward_kernel(
    T* grad_input, float* partials, const G* grad_output, const T* input, const W* __restrict__ weight,
    const float* __restrict__ mean, const float* __restrict__ rstd, float epsilon, int rows, int hidden,
    long long grad_input_stride, long long grad_output_stride, long long input_stride, int chunk_rows,
    int rows_per_block, long long ws_stride, int sums_in_shared, int fold) {
    static_assert(DBIAS || Weightless<W>::value, "with a weight, the kernel sums dbias too");
    norm_backward_rows<T, V, true, false, W, DBIAS, G>(grad_input, partials, grad_output, input, weight, mean, rstd,
                                                    epsilon, rows, hidden, grad_input_stride, grad_output_stride, input_stride,
                                                    chunk_rows, rows_per_block, ws_stride, sums_in_shared, fold);
}

// The staged variant of layer_norm_backward_kernel (norm_backward.cuh's norm_backward_staged: 16-byte
// aligned operands, rows pipelined through shared memory): the same arithmetic, so the same bits. HELD: the
// chunk's column sums (dweight and dbias, or dbias alone without a weight) in registers, HELD vectors a thread,
// for at most 256 threads (0: in shared memory).
template <typename T, typename W = T, bool DBIAS = true, typename G = T, int HELD = 0>
__global__ void __launch_bounds__(HELD > 0 ? 256 : 512, staged_min_blocks(HELD, param_planes<W, DBIAS>())) layer_norm_backward_staged_kernel(
    T* grad_input, float* partials, const G* grad_output, const T* input, const W* __restrict__ weight,
    const float* __restrict__ mean, const float* __restrict__ rstd, float epsilon, int rows, int hidden,
    long long grad_input_stride, long long grad_output_stride, long long input_stride, int chunk_rows,
    int rows_per_block, long long ws_stride, int fold, int dot_fold, int stages) {
    static_assert(DBIAS || Weightless<W>::value, "with a weight, the kernel sums dbias too");
    norm_backward_staged<T, true, false, W, DBIAS, G, HELD>(grad_input, partials, grad_output, input, weight, mean, rstd,
                                                   epsilon, rows,
                                                   hidden, grad_input_stride, grad_output_stride, input_stride,
                                                   chunk_rows, rows_per_block, ws_stride, fold, dot_fold, stages);
}

// Few rows given their saved mean and rstd, in one launch (norm_backward.cuh's norm_backward_few): dx, dw and db
// bitwise those of the kernels above, without a workspace. grad_weight, grad_bias: T or float by fp32_grads (null:
// not written).
template <typename T, typename W = T, bool DBIAS = true, typename G = T>
__global__ void __launch_bounds__(FEW_MAX_THREADS, 1) layer_norm_backward_few_kernel(
    T* grad_input, void* grad_weight, void* grad_bias, int fp32_grads, const G* grad_output, const T* input,
    const W* __restrict__ weight, const float* __restrict__ mean, const float* __restrict__ rstd, float epsilon,
    int rows, int hidden, long long grad_input_stride, long long grad_output_stride, long long input_stride,
    int chunk_rows, int fold) {
    static_assert(DBIAS || Weightless<W>::value, "with a weight, the kernel sums dbias too");
    norm_backward_few<T, true, false, W, DBIAS, G>(grad_input, grad_weight, grad_bias, fp32_grads, grad_output, input,
                                                   weight, mean, rstd, epsilon, rows, hidden, grad_input_stride,
                                                   grad_output_stride, input_stride, chunk_rows, fold);
}

}  // namespace pyrms
