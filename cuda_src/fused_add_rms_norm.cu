// Fused residual add + RMSNorm, in place. fused_add_rms_norm_kernel: vLLM's semantics (fused_add_rms_norm; the default),
//
//   residual[r, i] <- s[r, i] = round_T(input[r, i] + residual[r, i])      (__fadd_rn, then one rounding)
//   input[r, i]    <- rms_scale(s[r, i], w_i, inv_rms[r])                   (rms_norm_row.cuh's scaling)
//   inv_rms[r] = 1 / sqrt(sum_i float(s[r, i])^2 / hidden + eps)            (the ROUNDED sum is normalized)
//
// so `input` ends up equal to the plain kernel's RMSNorm of the updated residual, bit for bit: both run
// pyrms::rms_norm_row (rms_norm_row.cuh) on the row core; only pass 1's Source differs (added_row.cuh).
// Planned as the plain kernel is (pyrms/ops/_row_plan.py, block_and_cache), with the same variants: T, CACHE, SPREAD,
// GEMMA, ROUND_ONCE, EARLY_WEIGHTS, ALIGNED, and the weight's type W (rms_norm_row.cuh). Rows are addressed with 64-bit strides; input and residual each
// have their own row stride. No cache hints: the streaming hints that help the plain kernel made this
// kernel 11% slower on the H200 (docs/perf_notes.md, "Versions").
//
// Alignment: pass 1 splits the row at the RESIDUAL's 16-byte boundaries, so that residual loads and
// stores are 16 bytes wide; input is loaded at the widest width its alignment relative to the residual
// allows. Pass 2 (write_row) splits at the INPUT's boundaries, since input is what it writes, and
// re-reads the sums from the residual where they are not the ones held in registers.
//
// Memory: input and residual must be disjoint (checked by the op). Pass 2 reads sums that other
// threads of the block stored in pass 1; the barrier in the block sum orders those global writes
// before the reads, and residual is never read through the non-coherent (.nc) path.
//
// fused_add_rms_norm_fp32_sum_kernel: the other semantics (FlashInfer's and SGLang's; with R = float,
// QuACK's and Transformer Engine's fp32 residual stream beside bf16 or fp16 activations):
//
//   s[r, i] = input[r, i] + residual[r, i]                                  (__fadd_rn: the fp32 sum)
//   residual[r, i] <- R(s[r, i])                                            (rounded to T where R = T; exact for float)
//   input[r, i]    <- rms_scale(s[r, i], w_i, inv_rms[r])                   (the fp32 sum is normalized)
//   inv_rms[r] = 1 / sqrt(sum_i s[r, i]^2 / hidden + eps)
//
// the same variants and launch shapes, with the weight type W and the residual type R (T or float) always
// spelled out. The reduction tree is the row core's over the row split at the INPUT's 16-byte boundaries
// (not the residual's: pass 1 stores nothing here, pass 2 writes the input), the residual read and written
// at the widest width its alignment relative to the input allows (SummedRow, added_row.cuh). A float T
// has no second semantics (its sum is not rounded either way): the planner uses the kernel above.
#include "added_row.cuh"

namespace pyrms {

template <typename T, int CACHE, int SPREAD, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_kernel(
    T* input, T* residual, const W* __restrict__ weight, float epsilon, int hidden,
    long long input_stride, long long residual_stride) {
    constexpr int N = Vec<T>::N;
    begin_dependent_grid();
    T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    const AddedRow<T> sums{in_row, res_row,
                           ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (N - 1))};
    rms_norm_row<T, W, CACHE, SPREAD, ALIGNED, GEMMA, ROUND_ONCE, EARLY_WEIGHTS, false>(in_row, res_row, sums, weight,
                                                                              epsilon, hidden);
}

template <typename T, int CACHE, int SPREAD, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS, bool ALIGNED, typename W, typename R>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_fp32_sum_kernel(
    T* input, R* residual, const W* __restrict__ weight, float epsilon, int hidden, long long input_stride,
    long long residual_stride) {
    begin_dependent_grid();
    fp32_sum_rms_norm_row<T, W, R, CACHE, SPREAD, ALIGNED, GEMMA, ROUND_ONCE, EARLY_WEIGHTS>(
        input + static_cast<long long>(blockIdx.x) * input_stride,
        residual + static_cast<long long>(blockIdx.x) * residual_stride, weight, epsilon, hidden);
}

// The same with the normalized row written to `out` instead of over input (which is then only read): for an
// output type O other than T (float beside bf16/fp16 rows, as the plain kernel's O). The residual is updated as above,
// in T; pass 2 splits at OUT's boundaries. out must be disjoint from input, residual and weight.
template <typename T, int CACHE, int SPREAD, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS, bool ALIGNED, typename W,
          typename O>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD), 1) fused_add_rms_norm_out_kernel(
    O* out, const T* input, T* residual, const W* __restrict__ weight, float epsilon, int hidden,
    long long input_stride, long long residual_stride, long long out_stride) {
    constexpr int N = Vec<T>::N;
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* res_row = residual + static_cast<long long>(blockIdx.x) * residual_stride;
    const AddedRow<T> sums{in_row, res_row,
                           ALIGNED ? 16 : load_width<T>((vec_phase(in_row) - vec_phase(res_row)) & (N - 1))};
    rms_norm_row<T, W, CACHE, SPREAD, ALIGNED, GEMMA, ROUND_ONCE, EARLY_WEIGHTS, false>(
        out + static_cast<long long>(blockIdx.x) * out_stride, res_row, sums, weight, epsilon, hidden);
}

}  // namespace pyrms
