// pyrms's RMSNorm forward kernel, grown from the seed's (seed_rms_norm.cu).
//
//   out[r, i] = round_T( round_T(x[r, i] * inv_rms[r]) * w_i )      (default: the seed's rounding)
//   out[r, i] = round_T( (x[r, i] * inv_rms[r]) * w_i )             (ROUND_ONCE: PyTorch, current vLLM)
//   inv_rms[r] = 1 / sqrt(sum_i x[r, i]^2 / hidden + eps), all in fp32
//   w_i = weight[i], or 1 + weight[i] in fp32 (GEMMA)
//
// One block per row; the hidden size is a run-time value, so any hidden size from 1 up works; rows
// are addressed with 64-bit strides. The two passes and the reduction tree are the row core's
// (row_core.cuh): the sum of squares is split at the INPUT's 16-byte boundaries, the write pass at the
// OUTPUT's, so every body store is 16 bytes wide, and input and weight are loaded at the widest width
// their alignment relative to the output allows. Each pointer may be misaligned independently; each
// row of a strided tensor computes its own split.
//
// Variants (template parameters): T in {float, __half, __nv_bfloat16}; CACHE = how many 16-byte input
// vectors per fold thread stay in registers between the passes (0 = re-read them); SPREAD = threads
// per fold thread (1 for many rows; 2 or 4 for few, the row core's latency shape); GEMMA; ROUND_ONCE;
// EARLY_WEIGHTS (load the weights before the reduction: a latency choice for few rows); ALIGNED (the
// launcher found every row 16-byte aligned, hidden a multiple of the vector: see RowShape); W, the
// weight's type: T (the default), float (an fp32 weight with bf16 or fp16 rows: w_i is read exactly), or
// void (no weight, w_i = 1: out = round_T(x * inv_rms), either rounding, and weight is not read). The planner
// (pyrms/plan.py) picks the fold width F = blockDim.x / SPREAD and CACHE from the hidden size only,
// and every variant computes the same bits for the same F (the row core's tree).
//
// Cache hints: the held input vectors and the body stores are streaming accesses (load_streaming).
// In place (out == input) is allowed (see write_row).
#include "rms_norm_row.cuh"

namespace pyrms {

template <typename T, int CACHE, int SPREAD, bool GEMMA, bool ROUND_ONCE, bool EARLY_WEIGHTS, bool ALIGNED, typename W = T>
__global__ void __launch_bounds__(max_threads(CACHE / SPREAD)) rms_norm_kernel(
    T* out, const T* input, const W* __restrict__ weight, float epsilon, int hidden,
    long long input_stride, long long out_stride) {
    begin_dependent_grid();
    const T* in_row = input + static_cast<long long>(blockIdx.x) * input_stride;
    T* out_row = out + static_cast<long long>(blockIdx.x) * out_stride;
    rms_norm_row<T, W, CACHE, SPREAD, ALIGNED, GEMMA, ROUND_ONCE, EARLY_WEIGHTS, true>(out_row, in_row, RowIn<T, true>{in_row},
                                                                             weight, epsilon, hidden);
}

}  // namespace pyrms
