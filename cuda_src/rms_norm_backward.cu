// RMSNorm backward, with nothing saved by the forward, or given its rstd (docs/family.md; not the seed's formula):
//
//   inv = 1 / sqrt(mean(x^2) + eps),  x_hat = x * inv,  g = w * dy  (w = 1 + weight for GEMMA, in fp32)
//   dx  = inv * (g - x_hat * mean(x_hat * g))               rounded once to T
//   dw  = sum over all rows of dy * x_hat                  fp32, in a fixed order, then T or fp32
//   db  = sum over all rows of dy                          DBIAS only: RMSNorm with a bias (the LayerNorm source's
//                                                          CENTERED = false forward), the same order
//
// Kernel 1, rms_norm_backward_kernel<T, V, GEMMA, W, G>, writes dx and per-chunk fp32 partial sums of dw;
// kernel 2, sum_partials_kernel<OutT> (OutT = T, or float for an fp32 dw), sums the partials. Both,
// the alignment handling and the fixed dw order are described in norm_backward.cuh. Few rows with a saved
// rstd take one launch instead, rms_norm_backward_few_kernel: the same bits.
// W = void: no weight (w = 1, g = dy, as torch.nn.RMSNorm(elementwise_affine=False)): dx only, no
// partials, no kernel 2; dx is bitwise what W = T computes with a 16-byte aligned all-ones weight.
// W = float: an fp32 weight beside bf16/fp16 rows (mixed-precision training's master weights), dw in fp32;
// G = float: an fp32 dy (the gradient of the fp32 output such a weight gives). Both read exactly.
//
// inv is recomputed per row by pyrms::row_stats, in the forward's order: with the forward's block size
// (the planner uses it) it is bit for bit the forward's. Or it is read from `rstd` (fp32, one per row; null:
// recompute), the forward's own inv_rms when it saved it: the same value, so the same bits, and one block
// reduction less per row. V = how many 16-byte vectors per thread stay in
// registers (x, dy and their dw sums); 0 = re-read them, with the running sums in the workspace.
// The planner picks blockDim.x and V from the hidden size only.
#include "norm_backward.cuh"

namespace pyrms {

// partials and weight are not read without a weight (W = void; they may be null).
// DBIAS: also sum db (plane 1 beside dw, plane 0 without a weight); last, so the other name expressions stay.
template <typename T, int V, bool GEMMA, typename W = T, typename G = T, bool DBIAS = false>
__global__ void __launch_bounds__(backward_max_threads(V, false), 1) rms_norm_backward_kernel(
    T* grad_input, float* partials, const G* grad_output, const T* input, const W* __restrict__ weight,
    const float* __restrict__ rstd, float epsilon, int rows, int hidden, long long grad_input_stride,
    long long grad_output_stride, long long input_stride, int chunk_rows, int rows_per_block, long long ws_stride,
    int sums_in_shared, int fold) {
    norm_backward_rows<T, V, false, GEMMA, W, DBIAS, G>(grad_input, partials, grad_output, input, weight, nullptr, rstd, epsilon,
                                                    rows, hidden,
                                                    grad_input_stride, grad_output_stride, input_stride, chunk_rows,
                                                    rows_per_block, ws_stride, sums_in_shared, fold);
}

// The staged variant (norm_backward.cuh's norm_backward_staged: 16-byte aligned operands, rows pipelined
// through shared memory): the same arithmetic, so the same bits. dot_fold: the plan's block (the tree of the
// row sums that rms_norm_backward_kernel takes from its blockDim.x); stages: row buffers in flight. HELD: the
// chunk's column sums in registers, HELD vectors a thread, for at most 256 threads (0: in shared memory).
template <typename T, bool GEMMA, typename W = T, typename G = T, bool DBIAS = false, int HELD = 0>
__global__ void __launch_bounds__(HELD > 0 ? 256 : 512, staged_min_blocks(HELD, param_planes<W, DBIAS>())) rms_norm_backward_staged_kernel(
    T* grad_input, float* partials, const G* grad_output, const T* input, const W* __restrict__ weight,
    const float* __restrict__ rstd, float epsilon, int rows, int hidden, long long grad_input_stride,
    long long grad_output_stride, long long input_stride, int chunk_rows, int rows_per_block, long long ws_stride,
    int fold, int dot_fold, int stages) {
    norm_backward_staged<T, false, GEMMA, W, DBIAS, G, HELD>(grad_input, partials, grad_output, input, weight, nullptr, rstd, epsilon, rows,
                                                    hidden, grad_input_stride, grad_output_stride, input_stride,
                                                    chunk_rows, rows_per_block, ws_stride, fold, dot_fold, stages);
}

// Few rows given their saved rstd, in one launch (norm_backward.cuh's norm_backward_few): dx and the parameter
// gradients bitwise those of the two kernels above, without a workspace. grad_weight, grad_bias: T or float by
// fp32_grads (grad_bias: DBIAS only).
template <typename T, bool GEMMA, typename W = T, typename G = T, bool DBIAS = false>
__global__ void __launch_bounds__(FEW_MAX_THREADS, 1) rms_norm_backward_few_kernel(
    T* grad_input, void* grad_weight, void* grad_bias, int fp32_grads, const G* grad_output, const T* input,
    const W* __restrict__ weight, const float* __restrict__ rstd, float epsilon, int rows, int hidden,
    long long grad_input_stride, long long grad_output_stride, long long input_stride, int chunk_rows, int fold) {
    norm_backward_few<T, false, GEMMA, W, DBIAS, G>(grad_input, grad_weight, grad_bias, fp32_grads, grad_output, input,
                                                    weight, nullptr, rstd, epsilon, rows, hidden, grad_input_stride,
                                                    grad_output_stride, input_stride, chunk_rows, fold);
}

}  // namespace pyrms
